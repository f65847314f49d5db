/**
 * deploy/streaminfer-alerts.yml: valid rules, and the pipeline's "running but stale" alerts behave as
 * deploy/tests/stream-alerts.test.yml says (promtool's rule unit tests: fire when up but stale or lagging,
 * quiet when fresh). Needs promtool (Debian: apt install prometheus); without it the rules are still parsed
 * for the names they use.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import * as path from 'node:path';

const DEPLOY = path.resolve(__dirname, '../../../deploy');
const hasPromtool = spawnSync('promtool', ['--version'], { stdio: 'ignore' }).status === 0;

function promtool(...args: string[]): { status: number | null; out: string } {
  const r = spawnSync('promtool', args, { cwd: DEPLOY, encoding: 'utf8' });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

test('every pipeline alert names metrics the pipeline exports', () => {
  const rules = readFileSync(path.join(DEPLOY, 'streaminfer-alerts.yml'), 'utf8');
  const metrics = readFileSync(path.resolve(__dirname, '../../apps/stream/metrics.js'), 'utf8');
  const used = new Set(rules.match(/streaminfer_stream_[a-z_]+/g) ?? []);
  expect(used.size).toBeGreaterThan(5);
  for (const name of used) {
    const base = name.replace(/_(bucket|count|sum)$/, '');
    expect(metrics.includes(`'${base}'`)).toBe(true);
  }
});

(hasPromtool ? test : test.skip)(
  'promtool: the rules are valid and the stale-pipeline unit tests pass',
  () => {
    const check = promtool('check', 'rules', 'streaminfer-alerts.yml');
    expect(check.out).toContain('SUCCESS');
    expect(check.status).toBe(0);
    const unit = promtool('test', 'rules', 'tests/stream-alerts.test.yml');
    expect(unit.out).toContain('SUCCESS');
    expect(unit.status).toBe(0);
  },
);
