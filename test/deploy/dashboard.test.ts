/**
 * deploy/grafana/streaminfer.json is what deploy/grafana/dashboard.ts generates (`npm run dashboard`), its
 * layout is sound, and the recording rules its queries read are in deploy/streaminfer-recording.yml. That each
 * query returns data is checked against a live Prometheus in test/integration/prometheus.test.ts.
 */
import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import { dashboard, dashboardJson, dashboardQueries } from '../../deploy/grafana/dashboard';

const DEPLOY = path.resolve(__dirname, '../../../deploy');

test('the committed JSON is the generated one (else run `npm run dashboard`)', () => {
  const committed = readFileSync(path.join(DEPLOY, 'grafana/streaminfer.json'), 'utf8');
  expect(committed === dashboardJson()).toBe(true);
});

test('panels: unique ids, inside 24 columns, none overlapping', () => {
  const panels = dashboard.panels;
  expect(new Set(panels.map((p) => p.id)).size).toBe(panels.length);
  const cells = new Set<string>();
  for (const p of panels) {
    const { x, y, w, h } = p.gridPos!;
    expect(x + w).toBeLessThanOrEqual(24);
    for (let col = x; col < x + w; col++)
      for (let row = y; row < y + h; row++) {
        expect(cells.has(`${col},${row}`)).toBe(false);
        cells.add(`${col},${row}`);
      }
  }
});

test('every topic the operator needs has a panel', () => {
  const titles = dashboard.panels.map((p) => p.title ?? '').join('\n');
  for (const topic of [
    /request rate/i,
    /errors by code/i,
    /p50 \/ p95 \/ p99/i,
    /queue vs compute/i,
    /batch size/i,
    /shed by reason/i,
    /in-flight and queue depth/i,
    /event-loop lag per node/i,
    /cpu/i,
    /resident memory/i,
    /epoch and reloads/i,
    /canary share and shadow agreement/i,
  ])
    expect(titles).toMatch(topic);
});

test('every query selects the chosen hosts, and every recorded series it reads is recorded', () => {
  const recorded = new Set(
    [
      ...readFileSync(path.join(DEPLOY, 'streaminfer-recording.yml'), 'utf8').matchAll(/- record:\s*(\S+)/g),
    ].map((m) => m[1]!),
  );
  for (const { expr } of dashboardQueries()) {
    expect(expr).toContain('instance=~"$instance"');
    for (const name of expr.match(/[a-z_]+:[a-z0-9_:]+/g) ?? []) expect(recorded).toContain(name);
  }
});
