import { deliveryOptions, MIN, SEC } from './engine.test-util';
import { createEventTimeEngine, EngineOptionError, validateEngineOptions } from './index';

function optionError(input: unknown): EngineOptionError {
  try {
    validateEngineOptions(input as never);
  } catch (error) {
    expect(error).toBeInstanceOf(EngineOptionError);
    expect((error as EngineOptionError).code).toBe('invalid_engine_option');
    return error as EngineOptionError;
  }
  throw new Error('expected a EngineOptionError');
}

const base = deliveryOptions();

describe('validateEngineOptions', () => {
  it('returns a frozen copy with tumbling steps filled in', () => {
    const options = validateEngineOptions(base);
    expect(Object.isFrozen(options)).toBe(true);
    expect(Object.isFrozen(options.windows)).toBe(true);
    expect(options.windows.map((w) => [w.name, w.sizeMs, w.stepMs])).toEqual([
      ['speed5m', 5 * MIN, MIN],
      ['traffic10m', 10 * MIN, MIN],
      ['ids5m', 5 * MIN, 5 * MIN],
    ]);
    expect(validateEngineOptions({ ...base, latest: undefined }).latest).toEqual([]);
  });

  it.each([
    ['options', null],
    ['nonsense', { ...base, nonsense: 1 }],
    ['outOfOrdernessMs', { ...base, outOfOrdernessMs: -1 }],
    ['allowedLatenessMs', { ...base, allowedLatenessMs: 1.5 }],
    ['idleTimeoutMs', { ...base, idleTimeoutMs: 0 }],
    ['stateTtlMs', { ...base, stateTtlMs: '30m' }],
    ['dedupeTtlMs', { ...base, dedupeTtlMs: Number.NaN }],
    ['windows', { ...base, windows: {} }],
    ['windows[0]', { ...base, windows: [7] }],
    ['windows[0].name', { ...base, windows: [{ ...base.windows[0], name: '' }] }],
    ['windows[1].name', { ...base, windows: [base.windows[0], { ...base.windows[1], name: 'speed5m' }] }],
    ['windows[0].sizeMs', { ...base, windows: [{ ...base.windows[0], sizeMs: 0 }] }],
    ['windows[0].stepMs', { ...base, windows: [{ ...base.windows[0], stepMs: 6 * MIN }] }],
    ['windows[0].stepMs', { ...base, windows: [{ ...base.windows[0], stepMs: 1 }] }],
    ['windows[0].accepts', { ...base, windows: [{ ...base.windows[0], accepts: true }] }],
    ['windows[0].result', { ...base, windows: [{ ...base.windows[0], result: undefined }] }],
    ['windows[0].slide', { ...base, windows: [{ ...base.windows[0], slide: 1 }] }],
    ['latest', { ...base, latest: 'position' }],
    ['latest[1].name', { ...base, latest: [{ name: 'a' }, { name: 'a' }] }],
    ['latest[0].accepts', { ...base, latest: [{ name: 'a', accepts: 1 }] }],
    ['latest[0].when', { ...base, latest: [{ name: 'a', when: 1 }] }],
  ])('rejects %s', (option, input) => {
    expect(optionError(input).option).toBe(option);
  });

  it('requires both TTLs to cover the longest window plus allowed lateness', () => {
    const cover = 10 * MIN + 2 * MIN;
    const state = optionError({ ...base, stateTtlMs: cover - 1 });
    expect(state.option).toBe('stateTtlMs');
    expect(state.message).toContain(String(cover));
    expect(optionError({ ...base, dedupeTtlMs: cover - 1 }).option).toBe('dedupeTtlMs');
    expect(() => validateEngineOptions({ ...base, stateTtlMs: cover, dedupeTtlMs: cover })).not.toThrow();
  });

  it('accepts an engine with last-valid state only (no windows)', () => {
    const engine = createEventTimeEngine({
      outOfOrdernessMs: 0,
      allowedLatenessMs: 2,
      idleTimeoutMs: SEC,
      stateTtlMs: 3,
      dedupeTtlMs: 3,
      windows: [],
      latest: [{ name: 'any' }],
    });
    expect(
      engine.ingest({ key: 'k', eventTime: 10, partition: '', eventId: 'a', payload: null })[0]?.kind,
    ).toBe('accepted');
    // No window takes it: too late once the watermark reaches eventTime + 1 + allowed lateness (11 here).
    engine.ingest({ key: 'k', eventTime: 11, partition: '', eventId: 'b', payload: null });
    expect(
      engine.ingest({ key: 'k', eventTime: 10, partition: '', eventId: 'c', payload: null })[0]?.kind,
    ).toBe('accepted');
    expect(
      engine.ingest({ key: 'k', eventTime: 8, partition: '', eventId: 'd', payload: null })[0]?.kind,
    ).toBe('late');
    expect(engine.latest('k', 'any')?.eventId).toBe('b');
  });
});
