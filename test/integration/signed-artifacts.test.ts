/**
 * Signed model artifacts. Two `streaminfer serve` hosts of one fleet (loopback, a nats-server
 * of the test's own) trust one Ed25519 key (STREAMINFER_TRUSTED_KEYS); keys are made here with node:crypto.
 * A version pushed signed by it is served by both; the same bytes pushed unsigned, signed by another key, carrying
 * another version's signature, or with the model replaced in NATS after signing are refused by every host with
 * the reason, and the hosts keep serving what they had; the trusted keys rotate on SIGHUP.
 */
import { createHash, generateKeyPairSync, randomBytes } from 'node:crypto';
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Objm } from '@nats-io/obj';
import { connectFleet, type FleetConnection } from '../../apps/supervisor/fleet';
import {
  admin,
  FLEET_TOKEN,
  type FleetHost,
  health,
  pixels,
  pulledFile,
  startFleetHost,
  stopHost,
  waitFor,
} from './fleet-kit';
import { MODELS_DIR, runCliToExit, WsClient } from './harness';
import { createFleetNet, type FleetNet } from './netns-kit';

jest.setTimeout(120_000);

const FLEET = `s${randomBytes(3).toString('hex')}`;
const STEP_ENV = { STREAMINFER_RELOAD_STEP_TIMEOUT_MS: '4000' };

let net: FleetNet;
let nats: FleetConnection;
const hosts: FleetHost[] = [];
const dir = mkdtempSync(path.join(os.tmpdir(), 'streaminfer-signed-'));
const operator = path.join(dir, 'repo');
const trustedFile = path.join(dir, 'trusted.pem');
/** Private keys (PEM PKCS#8, mode 0600) and their public halves. */
const keys: Record<'a' | 'b', { key: string; pub: string }> = {} as never;

const sha256 = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');
const V1_BYTES = readFileSync(path.join(MODELS_DIR, 'digits', '1', 'model.onnx'));
const V2_BYTES = readFileSync(path.join(MODELS_DIR, 'digits', '2', 'model.onnx'));

/** Version `version` of digits in the operator's repository, holding version 2's model. */
function stage(version: string): void {
  cpSync(path.join(MODELS_DIR, 'digits', '2'), path.join(operator, 'digits', version), { recursive: true });
}

async function push(version: string, signWith?: 'a' | 'b', viaEnv = false) {
  stage(version);
  const args = ['models', 'push', 'digits', version, '--models-dir', operator, '--cluster', net.natsUrl];
  args.push('--fleet', FLEET, '--json');
  const env: Record<string, string> = {};
  if (signWith && viaEnv) env.STREAMINFER_SIGNING_KEY = keys[signWith].key;
  else if (signWith) args.push('--signing-key', keys[signWith].key);
  const pushed = await runCliToExit(args, env);
  expect(pushed).toMatchObject({ code: 0 });
  return JSON.parse(pushed.out.trim().split('\n').pop()!) as { sha256: string; keyId?: string };
}

async function revision(): Promise<number> {
  return (await admin(hosts[0]!.adminUrl, 'GET', '/api/fleet')).body.revision as number;
}

async function versionServed(host: FleetHost, version: string): Promise<string | undefined> {
  const client = await WsClient.connect(host.wsUrl);
  try {
    return (await client.request({ id: 1, model: 'digits', version, input: pixels(1) })).version;
  } finally {
    client.close();
  }
}

/**
 * Asked of each host in turn (each coordinates the change itself): refused with the model, version and reason
 * in the answer, nothing committed, the version's model nowhere on disk, version 3 still served everywhere.
 */
async function refusedEverywhere(version: string, reason: RegExp): Promise<void> {
  const before = await revision();
  for (const host of hosts) {
    const answer = await admin(host.adminUrl, 'POST', '/api/models/digits/candidate', { version });
    expect(answer.status).toBeGreaterThanOrEqual(400);
    expect(answer.body.message).toMatch(new RegExp(`model digits version ${version} refused: `));
    expect(answer.body.message).toMatch(reason);
  }
  expect(await revision()).toBe(before);
  for (const host of hosts) {
    expect(existsSync(path.join(host.modelsDir, 'digits', version, 'model.onnx'))).toBe(false);
    expect(existsSync(pulledFile(host, 'digits', version))).toBe(false);
    expect(await versionServed(host, '3')).toBe('3');
    expect(host.logs()).toMatch(new RegExp(`"version":"${version}".*"msg":"fleet: artifact refused"`));
  }
}

/** One sample of the host's /metrics. */
async function metric(host: FleetHost, series: string): Promise<number | undefined> {
  const response = await fetch(`${host.adminUrl}/metrics`, {
    headers: { authorization: `Bearer ${FLEET_TOKEN}` },
  });
  const line = (await response.text()).split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

/** SIGHUP to every host, one after the other, each once it logged the trusted keys it now holds. */
async function rotate(pubs: string[], ids: string[]): Promise<void> {
  writeFileSync(trustedFile, pubs.map((pub) => readFileSync(pub, 'utf8')).join('\n'));
  for (const host of hosts) {
    const seen = host.logs().length;
    process.kill(host.child.pid!, 'SIGHUP');
    await waitFor(
      () => {
        const line = host
          .logs()
          .slice(seen)
          .split('\n')
          .find((l) => l.includes('"msg":"fleet: trusted keys read"'));
        return line !== undefined && ids.every((id) => line.includes(id));
      },
      15_000,
      () => `host ${host.id} did not re-read its trusted keys:\n${host.logs().slice(seen).slice(-2000)}`,
    );
    // The configuration reload rides on a fleet change (the keys are read either way): it ends before the next.
    await waitFor(
      () =>
        /"msg":"(reload committed|reload failed|configuration rejected|SIGHUP refused)/.test(
          host.logs().slice(seen),
        ),
      15_000,
      () => `host ${host.id}: no reload outcome after SIGHUP`,
    );
  }
  await waitFor(
    async () => (await admin(hosts[0]!.adminUrl, 'GET', '/api/fleet')).body.coordinator === null,
    15_000,
    () => 'a fleet change still runs after the SIGHUPs',
  );
}

beforeAll(async () => {
  cpSync(path.join(MODELS_DIR, 'digits'), path.join(operator, 'digits'), { recursive: true });
  // Key a from node:crypto; key b from `models keygen` (its own test).
  const pair = generateKeyPairSync('ed25519');
  keys.a = { key: path.join(dir, 'a.pem'), pub: path.join(dir, 'a.pub') };
  writeFileSync(keys.a.key, pair.privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
  writeFileSync(keys.a.pub, pair.publicKey.export({ type: 'spki', format: 'pem' }));
  keys.b = { key: path.join(dir, 'b.pem'), pub: path.join(dir, 'b.pem.pub') };
  writeFileSync(trustedFile, readFileSync(keys.a.pub));
  net = await createFleetNet({ hosts: 2, prefix: 'sig', isolation: 'loopback' });
  await net.startNats();
  nats = await connectFleet({ servers: net.natsUrl, fleet: FLEET, hostId: 'attacker' });
  const env = { ...STEP_ENV, STREAMINFER_TRUSTED_KEYS: trustedFile };
  for (let i = 0; i < 2; i++) hosts.push(await startFleetHost(net, i, { fleet: FLEET, env }));
});

afterAll(async () => {
  await Promise.all(hosts.map((host) => stopHost(host)));
  await nats?.close();
  await net?.destroy();
  for (const left of [dir, ...hosts.map((host) => host.modelsDir)])
    rmSync(left, { recursive: true, force: true });
});

describe('signed model artifacts in a fleet', () => {
  test('models keygen writes a private key (mode 0600) and its public key, and never overwrites them', async () => {
    const made = await runCliToExit(['models', 'keygen', '--out', keys.b.key, '--json']);
    expect(made.code).toBe(0);
    const out = JSON.parse(made.out.trim()) as { privateKey: string; publicKey: string; keyId: string };
    expect(out).toEqual({
      privateKey: keys.b.key,
      publicKey: keys.b.pub,
      keyId: expect.stringMatching(/^[0-9a-f]{16}$/),
    });
    expect(statSync(keys.b.key).mode & 0o777).toBe(0o600);
    expect(readFileSync(keys.b.key, 'utf8')).toMatch(/^-----BEGIN PRIVATE KEY-----/);
    expect(readFileSync(keys.b.pub, 'utf8')).toMatch(/^-----BEGIN PUBLIC KEY-----/);
    const before = readFileSync(keys.b.key, 'utf8');
    const again = await runCliToExit(['models', 'keygen', '--out', keys.b.key]);
    expect(again.code).toBe(2);
    expect(again.out).toContain(`cannot write ${keys.b.key}: EEXIST`);
    expect(readFileSync(keys.b.key, 'utf8')).toBe(before);
  });

  test('a version signed by a trusted key is fetched, verified and served by every host', async () => {
    const pushed = await push('3', 'a');
    expect(pushed.sha256).toBe(sha256(V2_BYTES));
    expect(pushed.keyId).toMatch(/^[0-9a-f]{16}$/);
    const candidate = await admin(hosts[0]!.adminUrl, 'POST', '/api/models/digits/candidate', {
      version: '3',
    });
    expect(candidate.status).toBe(200);
    await waitFor(
      async () =>
        (await Promise.all(hosts.map((h) => health(h.url)))).every(
          (a) => a?.body.epoch === candidate.body.epoch,
        ),
      20_000,
      () => 'hosts did not reach the candidate epoch',
    );
    for (const host of hosts) {
      expect(sha256(readFileSync(pulledFile(host, 'digits', '3')))).toBe(pushed.sha256);
      expect(await versionServed(host, '3')).toBe('3');
    }
  });

  test('a signed version whose model is replaced in NATS after signing is refused everywhere: never served', async () => {
    await push('7', 'a', true);
    // A NATS writer puts other bytes (version 1's model) under the signed object, keeping its metadata.
    const store = await new Objm(nats.js).open(nats.names.modelsBucket);
    const info = await store.info('digits/7/model.onnx');
    await store.putBlob(
      { name: 'digits/7/model.onnx', ...(info?.metadata ? { metadata: info.metadata } : {}) },
      V1_BYTES,
    );
    await refusedEverywhere('7', /tampered: model\.onnx is \d+ bytes with sha256 [0-9a-f]{64}; signed were/);
  });

  test('the same bytes unsigned, signed by another key, or carrying another version’s signature are refused everywhere', async () => {
    await push('4');
    await refusedEverywhere('4', /unsigned/);
    await push('5', 'b');
    await refusedEverywhere('5', /untrusted_key: signed by key [0-9a-f]{16}, not one of the trusted keys/);
    // Version 3's signed metadata replayed onto version 6 (the same bytes).
    const store = await new Objm(nats.js).open(nats.names.modelsBucket);
    const signed = await store.info('digits/3/model.onnx');
    await store.putBlob({ name: 'digits/6/model.onnx', metadata: signed!.metadata! }, V2_BYTES);
    await refusedEverywhere('6', /wrong_artifact: it was signed for fleet \S+, model digits, version 3/);
    for (const host of hosts) {
      expect(await metric(host, 'streaminfer_fleet_artifacts_refused_total{reason="unsigned"}')).toBe(1);
      expect(await metric(host, 'streaminfer_fleet_artifacts_refused_total{reason="untrusted_key"}')).toBe(1);
      expect(await metric(host, 'streaminfer_fleet_trusted_keys')).toBe(1);
    }
  });

  test('a version already in a host’s own repository is not pulled there; a host that must pull it refuses it in PREPARE', async () => {
    // The operator put version 10 into host 0's repository; the store holds it unsigned.
    cpSync(path.join(MODELS_DIR, 'digits', '2'), path.join(hosts[0]!.modelsDir, 'digits', '10'), {
      recursive: true,
    });
    await push('10');
    const before = await revision();
    const answer = await admin(hosts[0]!.adminUrl, 'POST', '/api/models/digits/candidate', { version: '10' });
    expect(answer.status).toBeGreaterThanOrEqual(400);
    expect(answer.body.message).toMatch(
      /prepare failed, nothing changed: host h1: model digits version 10 refused: unsigned/,
    );
    expect(answer.body.message).not.toMatch(/host h0/);
    expect(await revision()).toBe(before);
    expect(existsSync(path.join(hosts[1]!.modelsDir, 'digits', '10'))).toBe(false);
    expect(existsSync(pulledFile(hosts[1]!, 'digits', '10'))).toBe(false);
    for (const host of hosts) expect(await versionServed(host, '3')).toBe('3');
  });

  test('key rotation on SIGHUP: the new key is trusted once added, the old one refused once removed', async () => {
    const idOf = (pub: string) =>
      createHash('sha256')
        .update(
          Buffer.from(
            readFileSync(pub, 'utf8')
              .replace(/-----[A-Z ]+-----/g, '')
              .replace(/\s/g, ''),
            'base64',
          ),
        )
        .digest('hex')
        .slice(0, 16);
    const [a, b] = [idOf(keys.a.pub), idOf(keys.b.pub)];
    await rotate([keys.a.pub, keys.b.pub], [a, b]);
    expect((await push('8', 'b')).keyId).toBe(b);
    const candidate = await admin(hosts[1]!.adminUrl, 'POST', '/api/models/digits/candidate', {
      version: '8',
    });
    expect(candidate.status).toBe(200);
    for (const host of hosts)
      await waitFor(
        async () => (await versionServed(host, '8').catch(() => undefined)) === '8',
        20_000,
        () => `host ${host.id} does not serve version 8`,
      );
    await rotate([keys.b.pub], [b]);
    await push('9', 'a');
    const before = await revision();
    for (const host of hosts) {
      const answer = await admin(host.adminUrl, 'POST', '/api/models/digits/candidate', { version: '9' });
      expect(answer.status).toBeGreaterThanOrEqual(400);
      expect(answer.body.message).toMatch(
        `model digits version 9 refused: untrusted_key: signed by key ${a}`,
      );
    }
    expect(await revision()).toBe(before);
    for (const host of hosts) expect(await versionServed(host, '8')).toBe('8');

    // A private key where the public keys belong: the reload is rejected, naming the file; key b stays trusted.
    writeFileSync(trustedFile, readFileSync(keys.a.key));
    const seen = hosts[0]!.logs().length;
    process.kill(hosts[0]!.child.pid!, 'SIGHUP');
    await waitFor(
      () => hosts[0]!.logs().slice(seen).includes('"msg":"configuration rejected'),
      15_000,
      () => 'no rejection logged',
    );
    expect(hosts[0]!.logs().slice(seen)).toContain(
      `trusted keys file ${trustedFile}: block 1 is a private key`,
    );
    await push('11', 'b');
    const candidate11 = await admin(hosts[0]!.adminUrl, 'POST', '/api/models/digits/candidate', {
      version: '11',
    });
    expect(candidate11.status).toBe(200);
    // No key material in any host's output.
    const body = (pem: string) => readFileSync(pem, 'utf8').split('\n')[1]!;
    for (const host of hosts)
      for (const pem of [keys.a.key, keys.b.key]) expect(host.logs()).not.toContain(body(pem));
  });

  test('a host whose trusted-keys file is not public keys does not start (exit 2, the file named)', async () => {
    const started = await runCliToExit(
      ['serve', '--port', '0', '--cluster', net.natsUrl, '--fleet', FLEET, '--trusted-keys', keys.a.key],
      STEP_ENV,
    );
    expect(started.code).toBe(2);
    expect(started.out).toContain(`streaminfer: trusted keys file ${keys.a.key}: block 1 is a private key`);
    expect(started.out).not.toContain(readFileSync(keys.a.key, 'utf8').split('\n')[1]!);
    const missing = await runCliToExit([
      'serve',
      '--port',
      '0',
      '--trusted-keys',
      path.join(dir, 'none.pem'),
    ]);
    expect(missing.code).toBe(2);
    expect(missing.out).toContain(`trusted keys file ${path.join(dir, 'none.pem')}: ENOENT`);
  });
});
