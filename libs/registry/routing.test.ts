import { mkdtempSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { argmax, loadState, type ModelRoutes, RoutingError, route, routingKeyDraw, saveState } from './index';
import { statePath } from './state';

const routes: ModelRoutes = { stable: '1', candidate: '2', canaryFraction: 0.1, shadow: false };

describe('route', () => {
  test('unpinned requests go to the candidate below the canary fraction, else to stable', () => {
    expect(route(routes, undefined, 0.05)).toEqual({
      version: '2',
      route: 'canary',
      shadowVersion: undefined,
    });
    expect(route(routes, undefined, 0.1)).toEqual({
      version: '1',
      route: 'stable',
      shadowVersion: undefined,
    });
    expect(route(routes, 'stable', 0.01)).toEqual({
      version: '1',
      route: 'stable',
      shadowVersion: undefined,
    });
  });
  test('pinned versions and the candidate alias bypass the canary', () => {
    expect(route(routes, '1', 0.01)).toMatchObject({ version: '1', route: 'pinned' });
    expect(route(routes, 'candidate', 0.99)).toMatchObject({ version: '2', route: 'pinned' });
    expect(() => route({ stable: '1', canaryFraction: 0, shadow: false }, 'candidate', 0)).toThrow(
      RoutingError,
    );
  });
  test('shadow without a canary mirrors stable-served requests to the candidate', () => {
    const shadow = { ...routes, canaryFraction: 0, shadow: true };
    expect(route(shadow, undefined, 0.5)).toEqual({ version: '1', route: 'stable', shadowVersion: '2' });
    expect(route(shadow, '2', 0.5).shadowVersion).toBeUndefined();
    expect(route(shadow, '1', 0.5).shadowVersion).toBeUndefined();
  });
  test('shadow with a canary mirrors the canary-served requests to stable, and nothing else', () => {
    const both = { ...routes, canaryFraction: 0.25, shadow: true };
    expect(route(both, undefined, 0.1)).toEqual({ version: '2', route: 'canary', shadowVersion: '1' });
    expect(route(both, undefined, 0.5)).toEqual({ version: '1', route: 'stable', shadowVersion: undefined });
    let mirrored = 0;
    for (let i = 0; i < 10000; i++) if (route(both, undefined, (i + 0.5) / 10000).shadowVersion) mirrored++;
    // The candidate's load is its share: the extra comparisons cost the stable side, not the candidate.
    expect(mirrored).toBe(2500);
  });
  test('reuses the object it is given', () => {
    const into = { version: '', route: 'stable' as const, shadowVersion: undefined };
    expect(route(routes, undefined, 0.5, into)).toBe(into);
  });
  test('the canary share over many uniform draws matches the fraction', () => {
    let canary = 0;
    for (let i = 0; i < 10000; i++)
      if (route(routes, undefined, (i + 0.5) / 10000).route === 'canary') canary++;
    expect(canary).toBe(1000);
  });
});

describe('routingKeyDraw', () => {
  test('is stable per key and spread over [0, 1)', () => {
    expect(routingKeyDraw('user-42')).toBe(routingKeyDraw('user-42'));
    const draws = Array.from({ length: 5000 }, (_, i) => routingKeyDraw(`user-${i}`));
    expect(Math.min(...draws)).toBeGreaterThanOrEqual(0);
    expect(Math.max(...draws)).toBeLessThan(1);
    const below = draws.filter((d) => d < 0.1).length / draws.length;
    expect(below).toBeGreaterThan(0.08);
    expect(below).toBeLessThan(0.12);
  });
});

test('argmax', () => {
  expect(argmax([0.1, 0.7, 0.2])).toBe(1);
  expect(argmax([3])).toBe(0);
});

describe('registry state file', () => {
  test('round-trips, written atomically', () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'state-'));
    saveState(dir, {
      models: {
        digits: { stable: '1', candidate: '2', canaryPercent: 10, shadow: true, previousStable: '2' },
      },
    });
    expect(loadState(dir)).toEqual({
      state: {
        models: {
          digits: { stable: '1', candidate: '2', canaryPercent: 10, shadow: true, previousStable: '2' },
        },
      },
    });
  });
  test('missing → nothing, no warning; corrupt → a warning, never a throw', () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'state-'));
    expect(loadState(dir)).toEqual({});
    writeFileSync(statePath(dir), '{"format": 1, "models": {"digits": {"canaryPercent": 500}}}');
    expect(loadState(dir).warning).toMatch(/corrupt/);
    writeFileSync(statePath(dir), 'not json');
    expect(loadState(dir).warning).toMatch(/corrupt/);
    writeFileSync(statePath(dir), '{"format": 99, "models": {}}');
    expect(loadState(dir).warning).toMatch(/unknown format/);
  });
});
