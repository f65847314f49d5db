/**
 * The pipeline's admin endpoint on the shared admin listener (libs/admin), in-process (no NATS: the pipeline
 * is still "starting", which is enough to see who gets past the checks): the token off loopback, the token
 * from a file, a unix socket of mode 0600, TLS.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import * as http from 'node:http';
import * as https from 'node:https';
import * as os from 'node:os';
import * as path from 'node:path';
import pino from 'pino';
import { AdminSetupError } from '../../libs/admin';
import { PipelineAdmin, readPipelineAdminSecrets } from './admin';
import { DEFAULT_PIPELINE_CONFIG, type PipelineConfig, resolvePipelineConfig } from './config';
import { PipelineMetrics } from './metrics';

const TOKEN = 'pipeline-admin-token-5e8d1c7a9b2f4036';
const logger = pino({ level: 'silent' });
const metrics = new PipelineMetrics();

function adminConfig(over: Partial<PipelineConfig['admin']>): PipelineConfig['admin'] {
  return { ...DEFAULT_PIPELINE_CONFIG.admin, port: 0, ...over };
}

function request(
  options: http.RequestOptions & { tls?: https.RequestOptions },
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const send = options.tls ? https.request : http.request;
    const req = send({ ...options, ...options.tls }, (res) => {
      let body = '';
      res.on('data', (chunk: Buffer) => (body += chunk.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'pipeline-admin-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

test('off loopback and off a unix socket, a token is required (refused before listening)', () => {
  expect(() => readPipelineAdminSecrets(adminConfig({ host: '0.0.0.0' }), {}, () => {})).toThrow(
    AdminSetupError,
  );
  expect(() => readPipelineAdminSecrets(adminConfig({ host: '0.0.0.0' }), {}, () => {})).toThrow(
    /admin\.host.*no token: set admin\.tokenFile/,
  );
  expect(
    readPipelineAdminSecrets(adminConfig({ host: '0.0.0.0' }), { STREAMINFER_ADMIN_TOKEN: TOKEN }, () => {}),
  ).toEqual({ token: TOKEN });
  expect(
    readPipelineAdminSecrets(adminConfig({ host: '0.0.0.0', socket: path.join(dir, 's') }), {}, () => {}),
  ).toEqual({});
  expect(() => resolvePipelineConfig({ admin: { tls: { cert: 'c.pem' } } })).toThrow(/admin\.tls/);
});

test('with admin.tokenFile, /api/* and /metrics need the token; probes do not', async () => {
  const tokenFile = path.join(dir, 'token');
  writeFileSync(tokenFile, `${TOKEN}\n`, { mode: 0o600 });
  const config = adminConfig({ tokenFile });
  const admin = new PipelineAdmin(
    () => undefined,
    metrics,
    config,
    readPipelineAdminSecrets(config, {}, () => {}),
    logger,
  );
  const { port } = await admin.listen();
  try {
    const at = { host: '127.0.0.1', port };
    for (const route of ['/api/pipeline', '/api/reload', '/metrics']) {
      const refused = await request({ ...at, path: route });
      expect([route, refused.status, JSON.parse(refused.body).code]).toEqual([route, 401, 'unauthorized']);
      expect(refused.body).not.toContain(TOKEN);
    }
    const authorized = { ...at, headers: { authorization: `Bearer ${TOKEN}` } };
    // Past the checks: the pipeline is not there yet (no NATS in this test).
    expect((await request({ ...authorized, path: '/api/pipeline' })).status).toBe(503);
    expect((await request({ ...authorized, path: '/metrics' })).status).toBe(200);
    expect((await request({ ...at, path: '/health' })).status).toBe(503);
  } finally {
    await admin.close();
  }
});

test('admin.socket: mode 0600, served; admin.tls: https with the certificate', async () => {
  const socket = path.join(dir, 'admin.sock');
  const onSocket = adminConfig({ socket });
  const unix = new PipelineAdmin(() => undefined, metrics, onSocket, {}, logger);
  expect((await unix.listen()).url).toBe(`unix:${socket}`);
  try {
    expect(statSync(socket).mode & 0o777).toBe(0o600);
    expect((await request({ socketPath: socket, path: '/metrics' })).status).toBe(200);
  } finally {
    await unix.close();
  }
  const key = path.join(dir, 'tls.key');
  const cert = path.join(dir, 'tls.crt');
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-keyout',
      key,
      '-out',
      cert,
      '-days',
      '1',
      '-subj',
      '/CN=localhost',
      '-addext',
      'subjectAltName=IP:127.0.0.1',
    ],
    { stdio: 'pipe' },
  );
  const withTls = adminConfig({ tls: { cert, key } });
  const secure = new PipelineAdmin(
    () => undefined,
    metrics,
    withTls,
    readPipelineAdminSecrets(withTls, {}, () => {}),
    logger,
  );
  const address = await secure.listen();
  try {
    expect(address.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    const answer = await request({
      host: '127.0.0.1',
      port: address.port!,
      path: '/metrics',
      tls: { ca: readFileSync(cert) },
    });
    expect(answer.status).toBe(200);
  } finally {
    await secure.close();
  }
});

test('GET /api/profile: the token first; a cpuprofile of the process; one at a time; seconds bounded', async () => {
  const config = adminConfig({});
  const admin = new PipelineAdmin(() => undefined, metrics, config, { token: TOKEN }, logger);
  const { port } = await admin.listen();
  try {
    const at = { host: '127.0.0.1', port };
    const authorized = { ...at, headers: { authorization: `Bearer ${TOKEN}` } };
    expect((await request({ ...at, path: '/api/profile?seconds=1' })).status).toBe(401);
    for (const bad of ['0', '121', '1.5', 'x', '-1'])
      expect([bad, (await request({ ...authorized, path: `/api/profile?seconds=${bad}` })).status]).toEqual([
        bad,
        400,
      ]);
    expect(
      (
        await request({
          ...at,
          method: 'POST',
          path: '/api/profile',
          headers: { ...authorized.headers, 'content-type': 'application/json' },
        })
      ).status,
    ).toBe(405);
    const first = request({ ...authorized, path: '/api/profile?seconds=1' });
    await new Promise((r) => setTimeout(r, 100));
    const second = await request({ ...authorized, path: '/api/profile?seconds=1' });
    expect([second.status, JSON.parse(second.body).code]).toEqual([409, 'profile_busy']);
    const done = await first;
    expect(done.status).toBe(200);
    const profile = JSON.parse(done.body) as {
      nodes: unknown[];
      samples: number[];
      startTime: number;
      endTime: number;
    };
    expect(profile.nodes.length).toBeGreaterThan(0);
    expect(profile.endTime - profile.startTime).toBeGreaterThanOrEqual(900_000);
    // Free again once the first is done.
    expect((await request({ ...authorized, path: '/api/profile?seconds=1' })).status).toBe(200);
  } finally {
    await admin.close();
  }
});
