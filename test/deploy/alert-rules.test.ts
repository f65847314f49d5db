/**
 * deploy/streaminfer-alerts.yml and deploy/streaminfer-recording.yml: valid rules, and every rule unit test in
 * deploy/tests/ passes (promtool's `test rules`: each alert fires on the data it is about and stays quiet on
 * data next to it; each recording rule computes what its name says). Needs promtool (Debian: apt install
 * prometheus); without it the rules are still read for the names they use and the cases they have.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import * as path from 'node:path';

const DEPLOY = path.resolve(__dirname, '../../../deploy');
const RULE_FILES = ['streaminfer-alerts.yml', 'streaminfer-recording.yml'];
const TEST_FILES = readdirSync(path.join(DEPLOY, 'tests'))
  .filter((name) => name.endsWith('.test.yml'))
  .sort()
  .map((name) => `tests/${name}`);
const hasPromtool = spawnSync('promtool', ['--version'], { stdio: 'ignore' }).status === 0;

function promtool(...args: string[]): { status: number | null; out: string } {
  const r = spawnSync('promtool', args, { cwd: DEPLOY, encoding: 'utf8' });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

function read(file: string): string {
  return readFileSync(path.join(DEPLOY, file), 'utf8');
}

test('every pipeline alert names metrics the pipeline exports', () => {
  const rules = read('streaminfer-alerts.yml');
  const dir = path.resolve(__dirname, '../../apps/pipeline/metrics');
  const metrics = readdirSync(dir)
    .filter((name) => name.endsWith('.js'))
    .map((name) => readFileSync(path.join(dir, name), 'utf8'))
    .join('\n');
  const used = new Set(rules.match(/streaminfer_stream_[a-z_]+/g) ?? []);
  expect(used.size).toBeGreaterThan(5);
  for (const name of used) {
    const base = name.replace(/_(bucket|count|sum)$/, '');
    expect(metrics.includes(`'${base}'`)).toBe(true);
  }
});

test('every alert has a unit test where it fires and one where it stays quiet', () => {
  const alerts = [...read('streaminfer-alerts.yml').matchAll(/- alert:\s*(\w+)/g)].map((m) => m[1]!);
  expect(alerts.length).toBeGreaterThanOrEqual(22);
  const fires = new Set<string>();
  const quiet = new Set<string>();
  for (const file of TEST_FILES)
    for (const m of read(file).matchAll(/alertname:\s*(\w+)[,\s]+exp_alerts:\s*(\[\])?/g))
      (m[2] === undefined ? fires : quiet).add(m[1]!);
  expect(alerts.filter((alert) => !fires.has(alert))).toEqual([]);
  expect(alerts.filter((alert) => !quiet.has(alert))).toEqual([]);
  // A test naming an alert that does not exist would pass vacuously (promtool expects no alerts from it).
  expect([...fires, ...quiet].filter((alert) => !alerts.includes(alert))).toEqual([]);
});

test('every recording rule has a unit test that reads it', () => {
  const records = new Set(
    [...read('streaminfer-recording.yml').matchAll(/- record:\s*(\S+)/g)].map((m) => m[1]!),
  );
  const tested = TEST_FILES.map(read).join('\n');
  // Intermediate bucket rates are read through the quantiles built on them.
  const untested = [...records].filter(
    (r) => !r.endsWith('_bucket:rate5m') && !tested.includes(`expr: ${r}`),
  );
  expect(untested).toEqual([]);
});

(hasPromtool ? test : test.skip)(
  'promtool: the config and rules are valid and every rule unit test passes',
  () => {
    // The scrape config names both rule files, so Prometheus loads what the dashboard reads.
    const config = promtool('check', 'config', 'prometheus.yml');
    expect(config.out).toContain(`SUCCESS: ${RULE_FILES.length} rule files found`);
    expect(config.status).toBe(0);
    const check = promtool('check', 'rules', ...RULE_FILES);
    expect(check.out).not.toContain('FAILED');
    expect(check.out.match(/SUCCESS/g)?.length).toBe(RULE_FILES.length);
    expect(check.status).toBe(0);
    expect(TEST_FILES.length).toBeGreaterThanOrEqual(3);
    const unit = promtool('test', 'rules', ...TEST_FILES);
    console.log(`promtool test rules ${TEST_FILES.join(' ')}: exit ${unit.status}`);
    expect(unit.out).not.toContain('FAILED');
    expect(unit.out.match(/SUCCESS/g)?.length).toBe(TEST_FILES.length);
    expect(unit.status).toBe(0);
  },
);
