/**
 * Under the shipped systemd unit (ProtectSystem=strict) the models dir is read-only, so a
 * host could not pull a fleet version into it. Pulled versions go to `<stateDir>/models` and the host loads them
 * from there; a pull that cannot write says which directory and which setting to change.
 *
 * The models dir is made read-only the way the unit makes it: a read-only bind mount (as root; `chmod` does not
 * stop root). Run as another user, `chmod a-w` is used instead (EACCES). Against the shared NATS at
 * the shared test broker (broker-kit), in a fleet of its own.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import {
  connectFleet,
  type FleetConnection,
  FleetError,
  fileSha256,
  ModelArtifacts,
  pullCacheDir,
} from '../../apps/supervisor/fleet';
import { TEST_NATS_URL } from './broker-kit';
import { pixels } from './fleet-kit';
import { MODELS_DIR, modelsSubset, postJson, runCliToExit, type ServerHandle, startServer } from './harness';

jest.setTimeout(90_000);

const NATS_URL = TEST_NATS_URL;
const FLEET = `pc${process.pid}_${randomBytes(3).toString('hex')}`;
const ROOT = process.getuid?.() === 0;
const mounted: string[] = [];
const locked: string[] = [];

/** Makes `dir` read-only for this process: a read-only bind mount as root, else its mode bits. */
function readOnly(dir: string): void {
  if (ROOT) {
    execFileSync('mount', ['--bind', dir, dir]);
    mounted.push(dir);
    execFileSync('mount', ['-o', 'remount,bind,ro', dir]);
  } else {
    for (const entry of [dir, ...walk(dir)]) chmodSync(entry, 0o555);
    locked.push(dir);
  }
}

function walk(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true }))
    if (entry.isDirectory()) out.push(path.join(dir, entry.name), ...walk(path.join(dir, entry.name)));
  return out;
}

/** Version `version` of digits pushed to the fleet, holding version 1's model. */
async function push(version: string): Promise<void> {
  const operator = modelsSubset([], ['digits']);
  cpSync(path.join(MODELS_DIR, 'digits', '1'), path.join(operator, 'digits', version), { recursive: true });
  const pushed = await runCliToExit([
    'models',
    'push',
    'digits',
    version,
    '--models-dir',
    operator,
    '--cluster',
    NATS_URL,
    '--fleet',
    FLEET,
  ]);
  expect(pushed).toMatchObject({ code: 0 });
}

let conn: FleetConnection;

beforeAll(async () => {
  conn = await connectFleet({
    servers: NATS_URL,
    fleet: FLEET,
    hostId: 'pull-cache-test',
    name: 'pull-cache-test',
  });
  await push('5');
  await push('6');
});

afterAll(async () => {
  for (const dir of mounted.reverse()) execFileSync('umount', [dir]);
  for (const dir of locked) for (const entry of [dir, ...walk(dir)]) chmodSync(entry, 0o755);
  await conn?.close();
});

describe('ModelArtifacts with a pull cache', () => {
  test('a version missing from a read-only models dir is written to the cache, not the models dir', async () => {
    const models = modelsSubset([], ['digits']);
    readOnly(models);
    const state = mkdtempSync(path.join(os.tmpdir(), 'streaminfer-pull-state-'));
    const artifacts = await ModelArtifacts.open(conn, undefined, pullCacheDir(state));
    const got = await artifacts.fetchInto(models, 'digits', '5');
    expect(got.fetched).toBe(true);
    const cached = path.join(state, 'models', 'digits', '5', 'model.onnx');
    expect(await fileSha256(cached)).toBe(got.sha256);
    expect(existsSync(path.join(models, 'digits', '5'))).toBe(false);
    // Pulled once: the cache's copy is the pushed one, nothing is fetched again.
    expect((await artifacts.fetchInto(models, 'digits', '5')).fetched).toBe(false);
  });

  test('a cache that cannot be written says so plainly: the directory and the setting', async () => {
    const models = modelsSubset([], ['digits']);
    const state = mkdtempSync(path.join(os.tmpdir(), 'streaminfer-pull-state-'));
    mkdirSync(path.join(state, 'models'));
    readOnly(path.join(state, 'models'));
    const artifacts = await ModelArtifacts.open(conn, undefined, pullCacheDir(state));
    const error = (await artifacts.fetchInto(models, 'digits', '6').catch((e: unknown) => e)) as FleetError;
    expect(error).toBeInstanceOf(FleetError);
    expect(error.code).toBe('artifact_unwritable');
    expect(error.message).toContain(`${path.join(state, 'models')} `);
    expect(error.message).toMatch(ROOT ? /read-only file system \(EROFS\)/ : /EACCES/);
    expect(error.message).toContain('STREAMINFER_STATE_DIR');
  });
});

describe('a host whose models dir is read-only', () => {
  let server: ServerHandle;
  let state: string;

  beforeAll(async () => {
    const models = modelsSubset([], ['digits']);
    readOnly(models);
    state = mkdtempSync(path.join(os.tmpdir(), 'streaminfer-pull-state-'));
    server = await startServer({
      modelsDir: models,
      args: ['--nodes', '1', '--workers', '1', '--model', 'digits', '--cluster', NATS_URL, '--fleet', FLEET],
      env: { STREAMINFER_STATE_DIR: state, STREAMINFER_HOST_ID: 'pull-cache-host' },
    });
  });

  afterAll(async () => {
    await server?.stop();
  });

  test('pulls a pushed version into <stateDir>/models and serves it from there', async () => {
    const reload = await postJson(`${server.adminUrl}/api/reload`, { model: 'digits', version: '5' });
    expect(reload.body).toMatchObject({ result: 'committed' });
    const file = path.join(state, 'models', 'digits', '5', 'model.onnx');
    expect(readFileSync(file).equals(readFileSync(path.join(MODELS_DIR, 'digits', '1', 'model.onnx')))).toBe(
      true,
    );
    const answer = await postJson(`${server.url}/predict`, { id: 1, model: 'digits', input: pixels(0) });
    expect(answer.status).toBe(200);
    expect(answer.body.version).toBe('5');
  });
});
