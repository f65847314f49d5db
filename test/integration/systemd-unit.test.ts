/**
 * deploy/streaminfer.service as systemd reads it. `systemd-analyze verify` exits 0 on many errors (an unknown
 * Type=, a bad WatchdogSec=), so any output is a failure. It also checks that every Exec command exists: where
 * /usr/bin/node does not, the test verifies a copy that names this test's node instead.
 */
import { spawnSync } from 'node:child_process';
import { accessSync, constants, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { REPO_ROOT } from './harness';

const UNIT = path.join(REPO_ROOT, 'deploy/streaminfer.service');
const analyze = spawnSync('systemd-analyze', ['--version']).status === 0;

function executable(file: string): boolean {
  try {
    accessSync(file, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** `systemd-analyze verify` on `text` saved as streaminfer.service; returns everything it printed. */
function verify(text: string): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'streaminfer-unit-'));
  const file = path.join(dir, 'streaminfer.service');
  writeFileSync(
    file,
    executable('/usr/bin/node') ? text : text.replaceAll('/usr/bin/node ', `${process.execPath} `),
  );
  const result = spawnSync('systemd-analyze', ['verify', file], { encoding: 'utf8' });
  return `${result.stdout}${result.stderr}`.trim();
}

describe('deploy/streaminfer.service', () => {
  const text = readFileSync(UNIT, 'utf8');
  const settings = new Map(
    text
      .split('\n')
      .filter((line) => /^[A-Za-z]+=/.test(line))
      .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]),
  );

  test('is a notify service with a watchdog, a waiting reload and room for model loads', () => {
    expect(settings.get('Type')).toBe('notify');
    // The supervisor itself sends (node-unix-socket): only the main pid needs to be heard.
    expect(settings.get('NotifyAccess')).toBe('main');
    expect(Number(settings.get('WatchdogSec'))).toBeGreaterThan(0);
    expect(settings.get('ExecReload')).toMatch(
      /main\.js reload --wait --config \/etc\/streaminfer\/config\.json$/,
    );
    expect(Number(settings.get('TimeoutStartSec'))).toBeGreaterThanOrEqual(120);
    expect(Number(settings.get('TimeoutStopSec'))).toBeGreaterThan(30);
    for (const hardening of ['NoNewPrivileges', 'ProtectSystem', 'ProtectHome', 'PrivateTmp'])
      expect(settings.has(hardening)).toBe(true);
  });

  (analyze ? test : test.skip)('systemd-analyze verify prints nothing', () => {
    expect(verify(text)).toBe('');
  });

  (analyze ? test : test.skip)('…and does print what is wrong in a broken copy (the check can fail)', () => {
    const broken = text
      .replace(/^Type=notify$/m, 'Type=notifyy')
      .replace(/^WatchdogSec=.*$/m, 'WatchdogSec=soon');
    const output = verify(broken);
    expect(output).toContain('Failed to parse service type');
    expect(output).toContain('Failed to parse sec value');
  });
});
