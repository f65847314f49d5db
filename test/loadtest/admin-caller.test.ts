import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { AdminCaller } from '../../loadtest/harness/admin-caller';

describe('AdminCaller (admin calls from a child process)', () => {
  let server: http.Server;
  let base: string;
  let caller: AdminCaller;
  const seen: { method?: string; url?: string; body: string }[] = [];

  beforeAll(async () => {
    server = http.createServer((req, res) => {
      let body = '';
      req.on('data', (chunk: Buffer) => {
        body += chunk.toString();
      });
      req.on('end', () => {
        seen.push({ method: req.method, url: req.url, body });
        if (req.url === '/slow') {
          setTimeout(() => res.end('{"ok":true}'), 60);
          return;
        }
        res.writeHead(req.url === '/missing' ? 404 : 200, { 'content-type': 'application/json' });
        res.end(
          req.url === '/missing'
            ? '{"code":"not_found","message":"no such thing"}'
            : `{"echo":${body || 'null'}}`,
        );
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    caller = await AdminCaller.start(`${base}/warm`);
  });

  afterAll(async () => {
    caller.close();
    await new Promise((resolve) => server.close(resolve));
  });

  it('warms the child with a GET, then POSTs JSON and returns status and parsed body', async () => {
    expect(seen[0]).toMatchObject({ method: 'GET', url: '/warm' });
    const call = await caller.post(`${base}/api/reload`, { model: 'digits', version: '1' });
    expect(call.status).toBe(200);
    expect(call.body).toEqual({ echo: { model: 'digits', version: '1' } });
    expect(seen.at(-1)).toMatchObject({ method: 'POST', url: '/api/reload' });
  });

  it('stamps the call on this process’s performance.now() clock', async () => {
    const before = performance.now();
    const call = await caller.post(`${base}/slow`, {});
    const after = performance.now();
    // the child's wall-clock stamps, moved onto our clock: inside our window (1 ms for rounding)
    expect(call.calledMs).toBeGreaterThanOrEqual(before - 1);
    expect(call.returnedMs).toBeLessThanOrEqual(after + 1);
    expect(call.returnedMs - call.calledMs).toBeGreaterThanOrEqual(55);
  });

  it('reports HTTP errors and transport failures without throwing', async () => {
    const missing = await caller.post(`${base}/missing`, {});
    expect(missing.status).toBe(404);
    expect(missing.body).toMatchObject({ code: 'not_found' });
    const refused = await caller.post('http://127.0.0.1:1/nothing', {}, 2_000);
    expect(refused.status).toBe(0);
    expect(refused.error).toBeTruthy();
  });

  it('answers status 0 once the child is gone', async () => {
    const other = await AdminCaller.start();
    other.close();
    await new Promise((resolve) => setTimeout(resolve, 100));
    const call = await other.post(`${base}/api/reload`, {});
    expect(call.status).toBe(0);
    expect(call.error).toMatch(/exited/);
  });
});
