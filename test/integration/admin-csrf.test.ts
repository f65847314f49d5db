/**
 * A web page in a browser on the host must not reach the admin API, and an
 * unauthenticated admin request must cost nothing. A cross-origin CORS "simple" request (text/plain, with an
 * Origin) to a registry route from loopback is refused and changes nothing; a DNS-rebound request (loopback
 * address, foreign Host) is refused without a token; with a token configured, an unauthenticated 1 MiB
 * POST is answered 401 by the admin listener from its headers: the body is never read nor handed to the
 * admin API.
 * The CLI keeps working (it sends JSON and names a loopback host).
 */
import * as http from 'node:http';
import type { ServerHandle } from './harness';
import { runCliToExit, startServer } from './harness';

interface RawAnswer {
  status: number;
  body: Record<string, unknown>;
  contentType: string;
}

/** An HTTP request with exactly these headers (fetch would not send a foreign Host). */
function raw(
  url: string,
  method: string,
  path: string,
  headers: Record<string, string>,
  body?: string | Buffer,
): Promise<RawAnswer> {
  const target = new URL(url);
  return new Promise((resolve, reject) => {
    const request = http.request(
      { host: target.hostname, port: target.port, method, path, headers, agent: false },
      (response) => {
        let text = '';
        response.on('data', (chunk: Buffer) => (text += chunk.toString()));
        response.on('end', () =>
          resolve({
            status: response.statusCode ?? 0,
            body: JSON.parse(text) as Record<string, unknown>,
            contentType: String(response.headers['content-type']),
          }),
        );
      },
    );
    // The server may answer and close before the whole body went out: that is the point, not an error.
    request.on('error', (error: NodeJS.ErrnoException) => {
      if (error.code !== 'EPIPE' && error.code !== 'ECONNRESET') reject(error);
    });
    if (body !== undefined) request.end(body);
    else request.end();
  });
}

async function digitsAliases(url: string): Promise<Record<string, string>> {
  const listing = (await (await fetch(`${url}/api/models`)).json()) as {
    models: { name: string; aliases: Record<string, string> }[];
  };
  return listing.models.find((m) => m.name === 'digits')!.aliases;
}

async function metric(url: string, pattern: RegExp, headers: Record<string, string> = {}): Promise<number> {
  const text = await (await fetch(`${url}/metrics`, { headers })).text();
  const match = pattern.exec(text);
  return match ? Number(match[1]) : 0;
}

describe('admin API: CSRF and DNS rebinding without a token', () => {
  let server: ServerHandle;
  beforeAll(async () => {
    server = await startServer({ models: ['digits'], args: ['--nodes', '1', '--model', 'digits'] });
  });
  afterAll(async () => {
    await server?.stop();
  });

  test('a cross-origin text/plain POST to a registry route is refused and changes nothing', async () => {
    const before = await digitsAliases(server.adminUrl);
    expect(before.candidate).toBeUndefined();
    const host = `127.0.0.1:${server.adminPort}`;
    const csrf = await raw(
      server.adminUrl,
      'POST',
      '/api/models/digits/candidate',
      { host, origin: 'http://evil.example', 'content-type': 'text/plain;charset=UTF-8' },
      JSON.stringify({ version: '1' }),
    );
    expect([csrf.status, csrf.body.code, csrf.contentType]).toEqual([403, 'forbidden', 'application/json']);
    // the same without Origin (a page that hides it cannot send JSON without a preflight): 415
    const plain = await raw(
      server.adminUrl,
      'POST',
      '/api/models/digits/candidate',
      { host, 'content-type': 'text/plain;charset=UTF-8' },
      JSON.stringify({ version: '1' }),
    );
    expect([plain.status, plain.body.code]).toEqual([415, 'unsupported_media_type']);
    const form = await raw(
      server.adminUrl,
      'POST',
      '/api/reload',
      { host, 'content-type': 'application/x-www-form-urlencoded' },
      'model=digits&version=1',
    );
    expect([form.status, form.body.code]).toEqual([415, 'unsupported_media_type']);
    expect(await digitsAliases(server.adminUrl)).toEqual(before);
  });

  test('a foreign Host (DNS rebinding) is refused without a token, GET and POST', async () => {
    for (const [method, path, body] of [
      ['GET', '/api/models', undefined],
      ['GET', '/api/reload', undefined],
      ['POST', '/api/models/digits/candidate', JSON.stringify({ version: '1' })],
    ] as const) {
      const answer = await raw(
        server.adminUrl,
        method,
        path,
        { host: `evil.example:${server.adminPort}`, 'content-type': 'application/json' },
        body,
      );
      expect([path, answer.status, answer.body.code]).toEqual([path, 403, 'forbidden']);
      expect(String(answer.body.message)).toMatch(/Host "evil\.example:\d+"/);
    }
    const fromPage = await raw(server.adminUrl, 'GET', '/api/models', {
      host: `127.0.0.1:${server.adminPort}`,
      origin: 'http://evil.example',
    });
    expect([fromPage.status, fromPage.body.code]).toEqual([403, 'forbidden']);
    expect((await digitsAliases(server.adminUrl)).candidate).toBeUndefined();
    for (const host of [
      'localhost',
      `localhost:${server.adminPort}`,
      `127.0.0.1:${server.adminPort}`,
      '[::1]',
    ])
      expect([host, (await raw(server.adminUrl, 'GET', '/api/models', { host })).status]).toEqual([
        host,
        200,
      ]);
  });

  test('the CLI still works: it sends JSON and a loopback Host', async () => {
    const deploy = await runCliToExit(['models', 'deploy', 'digits', '1', '--url', server.adminUrl]);
    expect(deploy.out).toContain('digits: stable=2 candidate=1');
    expect(deploy.code).toBe(0);
    const list = await runCliToExit(['models', 'list', '--url', server.adminUrl]);
    expect(list.code).toBe(0);
    expect(list.out).toContain('digits');
    expect((await digitsAliases(server.adminUrl)).candidate).toBe('1');
  });
});

describe('admin API: authentication is decided before the body is read', () => {
  const token = 'a-long-admin-token-for-this-test-0123456789';
  let server: ServerHandle;
  beforeAll(async () => {
    server = await startServer({
      models: ['digits'],
      args: ['--nodes', '1', '--model', 'digits'],
      env: { STREAMINFER_ADMIN_TOKEN: token },
    });
  });
  afterAll(async () => {
    await server?.stop();
  });

  test('an unauthenticated 1 MiB POST is answered 401 from its headers and never reaches the admin API', async () => {
    const authorization = { authorization: `Bearer ${token}` };
    const seen = () => metric(server.adminUrl, /^streaminfer_admin_requests_total (\S+)$/m, authorization);
    const refused = () =>
      metric(
        server.adminUrl,
        /^streaminfer_admin_refused_total\{code="unauthorized"\} (\S+)$/m,
        authorization,
      );
    const listing = await fetch(`${server.adminUrl}/api/models`, { headers: authorization });
    expect(listing.status).toBe(200);
    const seenBefore = await seen();
    expect(seenBefore).toBeGreaterThanOrEqual(1);
    const refusedBefore = await refused();
    const body = Buffer.alloc(1024 * 1024, 0x20);
    const answer = await raw(
      server.adminUrl,
      'POST',
      '/api/reload',
      { host: `127.0.0.1:${server.adminPort}`, 'content-type': 'application/json' },
      body,
    );
    expect([answer.status, answer.body.code]).toEqual([401, 'unauthorized']);
    expect(await seen()).toBe(seenBefore);
    expect(await refused()).toBe(refusedBefore + 1);
    // with the token, any Host is fine (a rebinding page cannot have the token)
    const withToken = await raw(server.adminUrl, 'GET', '/api/reload', {
      host: 'admin.example',
      ...authorization,
    });
    expect(withToken.status).toBe(200);
    expect(await seen()).toBe(seenBefore + 1);
    // the CLI with its token
    const list = await runCliToExit(['models', 'list', '--url', server.adminUrl, '--token', token]);
    expect([list.code, list.out]).toEqual([0, expect.stringContaining('digits')]);
  });
});
