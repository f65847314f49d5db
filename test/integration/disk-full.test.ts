/**
 * A full disk under the state directory: a registry change is refused `507 storage_full` with nothing changed
 * (no node commits, the table and epoch stay), the temporary file is gone, the failure is counted; once space is
 * back the same change commits and survives a restart. The disk is a real one that fills up: a 256 KiB tmpfs
 * mounted as the state directory where this process may mount (root); elsewhere `/dev/full` linked at the path
 * of the supervisor's temporary file (every write to it fails ENOSPC in the kernel). The test says which.
 */
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { ServerHandle } from './harness';
import { postJson, startServer } from './harness';

type Models = { models: { name: string; aliases: { stable: string; candidate?: string } }[] };

function tryMount(dir: string): boolean {
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=256k', 'tmpfs', dir], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

describe('a full disk under the state directory', () => {
  const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'streaminfer-diskfull-'));
  const mounted = tryMount(stateDir);
  const filler = path.join(stateDir, 'filler');
  let server: ServerHandle | undefined;
  const start = () =>
    startServer({
      models: ['digits'],
      args: ['--nodes', '1', '--workers', '1', '--model', 'digits'],
      env: { STREAMINFER_STATE_DIR: stateDir },
    });

  /** Takes every free block (tmpfs), or makes the supervisor's temporary file a /dev/full. */
  function fillUp(pid: number): void {
    if (mounted) {
      try {
        fs.writeFileSync(filler, Buffer.alloc(1024 * 1024));
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'ENOSPC') throw error;
      }
      return;
    }
    fs.symlinkSync('/dev/full', path.join(stateDir, `registry.json.${pid}.tmp`));
  }

  function makeRoom(pid: number): void {
    fs.rmSync(mounted ? filler : path.join(stateDir, `registry.json.${pid}.tmp`), { force: true });
  }

  afterAll(async () => {
    await server?.stop();
    if (mounted) execFileSync('umount', [stateDir]);
    fs.rmSync(stateDir, { recursive: true, force: true });
  });

  test('507 storage_full, nothing changed, no temporary file; with room again it commits and persists', async () => {
    process.stdout.write(`disk-full: ${mounted ? 'a 256 KiB tmpfs' : '/dev/full at the temporary path'}\n`);
    server = await start();
    const models = async (): Promise<Models> =>
      (await (await fetch(`${server!.adminUrl}/api/models`)).json()) as Models;
    const candidate = async () => (await models()).models.find((m) => m.name === 'digits')!.aliases.candidate;
    expect(await candidate()).toBeUndefined();

    fillUp(server.pid);
    const refused = await postJson(`${server.adminUrl}/api/models/digits/candidate`, { version: '1' });
    expect(refused.status).toBe(507);
    expect(refused.body).toMatchObject({ code: 'storage_full', result: 'failed' });
    expect(String(refused.body.message)).toContain(path.join(stateDir, 'registry.json'));
    expect(refused.body.epoch).toBe(refused.body.epoch_before);
    expect(await candidate()).toBeUndefined();
    if (mounted) expect(fs.readdirSync(stateDir).filter((name) => name.endsWith('.tmp'))).toEqual([]);
    const metrics = await (await fetch(`${server.adminUrl}/metrics`)).text();
    expect(metrics).toMatch(
      /streaminfer_state_persist_failures_total\{file="registry",code="storage_full"\} 1\b/,
    );

    makeRoom(server.pid);
    const committed = await postJson(`${server.adminUrl}/api/models/digits/candidate`, { version: '1' });
    expect(committed.status).toBe(200);
    expect(fs.readdirSync(stateDir).filter((name) => name.endsWith('.tmp'))).toEqual([]);
    await server.stop();

    server = await start();
    expect(await candidate()).toBe('1');
  }, 60000);
});
