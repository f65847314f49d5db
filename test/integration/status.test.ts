import * as net from 'node:net';
import type { ServerHandle } from './harness';
import { postJson, runCli, runCliToExit, startServer, WsClient } from './harness';

const TOKEN = 'status-s3cret';

/** Echo requests from a few WebSocket clients until `stop()`; resolves to the number answered. */
function driveTraffic(wsUrl: string): { stop: () => Promise<number> } {
  let running = true;
  const done = (async () => {
    const clients = await Promise.all(Array.from({ length: 4 }, () => WsClient.connect(wsUrl)));
    let answered = 0;
    await Promise.all(
      clients.map(async (client, c) => {
        for (let id = 0; running; id++) {
          const answer = await client.request({ id, model: 'echo', input: [c, id, 3] });
          if (answer.type !== 'error') answered++;
        }
      }),
    );
    for (const client of clients) client.close();
    return answered;
  })();
  return {
    stop: () => {
      running = false;
      return done;
    },
  };
}

/** A port nothing listens on (bound, then released). */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

describe('streaminfer status against a running server', () => {
  let server: ServerHandle;
  let epoch: number;
  beforeAll(async () => {
    server = await startServer({
      models: ['echo', 'upper', 'digits'],
      args: ['--nodes', '2', '--workers', '1'],
      env: { STREAMINFER_ADMIN_TOKEN: TOKEN },
    });
    // A rollout in progress, so the frame has aliases beyond stable: digits v1 as candidate, 25% canary.
    const auth = { authorization: `Bearer ${TOKEN}` };
    expect(
      (await postJson(`${server.adminUrl}/api/models/digits/candidate`, { version: '1' }, auth)).status,
    ).toBe(200);
    const canary = await postJson(`${server.adminUrl}/api/models/digits/canary`, { percent: 25 }, auth);
    expect(canary.status).toBe(200);
    epoch = canary.body.epoch as number;
  }, 90000);
  afterAll(async () => {
    expect(await server.stop()).toEqual({ code: 0, signal: null });
  });

  test('one screen: every node, the epoch, models with aliases, the rate and latency of the busy model', async () => {
    const traffic = driveTraffic(server.wsUrl);
    await new Promise((resolve) => setTimeout(resolve, 300));
    const started = Date.now();
    const status = await runCliToExit(['status', '--port', String(server.adminPort), '--token', TOKEN]);
    const tookMs = Date.now() - started;
    const answered = await traffic.stop();
    expect(answered).toBeGreaterThan(0);
    expect(status.code).toBe(0);
    const lines = status.out.trimEnd().split('\n');
    for (const line of lines) expect(line.length).toBeLessThanOrEqual(100);
    expect(lines[0]).toMatch(
      new RegExp(
        `^streaminfer http://127\\.0\\.0\\.1:${server.adminPort} \\d\\d:\\d\\d:\\d\\d UTC: ok, epoch ${epoch}, `,
      ),
    );
    expect(epoch).toBeGreaterThan(0);
    const window = /^requests over the last (\d+\.\d) s: ([\d.]+)\/s \(ok [\d.]+\)$/.exec(lines[1]!);
    expect(window).not.toBeNull();
    expect(Number(window![1])).toBeGreaterThanOrEqual(0.9);
    expect(Number(window![2])).toBeGreaterThan(0);
    server.nodePids.forEach((pid, node) =>
      expect(lines).toContainEqual(expect.stringMatching(new RegExp(`^${node} +ready +${pid} +1/1 +`))),
    );
    // echo: traffic in the window, so a non-zero rate and measured p50/p99; the others idle.
    const echo = lines.find((line) => line.startsWith('echo *'));
    expect(echo).toMatch(
      /^echo \* +stable=1 +([1-9][\d.]*|0\.\d*[1-9]\d*) +0 +0 +[\d.]+ m?s +[\d.]+ m?s +\d+ +\d+$/,
    );
    expect(lines).toContainEqual(expect.stringMatching(/^upper +stable=1 +0 +0 +0 +- +- +0 +0$/));
    expect(lines).toContainEqual(expect.stringMatching(/^digits +stable=2 candidate=1 +0 /));
    expect(lines).toContain('    canary 25%');
    // The registry changes were reloads: the last one moved the epoch to what the canary answer said.
    expect(lines[3]).toMatch(
      new RegExp(
        `^last reload #\\d+: committed \\(atomic\\), epoch ${epoch - 1} -> ${epoch} in \\d+ ms, \\d+s ago$`,
      ),
    );
    console.log(`streaminfer status took ${tookMs} ms (with node start-up); frame:\n${status.out}`);
  });

  test('--json gives the same summary with snake_case keys', async () => {
    const status = await runCliToExit(['status', '--url', server.adminUrl, '--json'], {
      STREAMINFER_ADMIN_TOKEN: TOKEN,
    });
    expect(status.code).toBe(0);
    const json = JSON.parse(status.out) as { models: Array<{ name: string; aliases: object }> };
    expect(json).toMatchObject({
      status: 'ok',
      default_model: 'echo',
      epoch,
      nodes: [{ node: 0 }, { node: 1 }],
    });
    expect(json.models.find((m) => m.name === 'digits')?.aliases).toEqual({ stable: '2', candidate: '1' });
  });

  test('--watch 1 redraws every second and exits 0 on SIGINT', async () => {
    const child = runCli(['status', '--port', String(server.adminPort), '--token', TOKEN, '--watch', '1']);
    let out = '';
    child.stderr!.on('data', (chunk: Buffer) => (out += chunk.toString()));
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
      child.on('exit', (code, signal) => resolve({ code, signal })),
    );
    const frames = (): number => out.match(/^requests over the last/gm)?.length ?? 0;
    const started = Date.now();
    const twoFrames = new Promise<void>((resolve) =>
      child.stdout!.on('data', (chunk: Buffer) => {
        out += chunk.toString();
        if (frames() >= 2) resolve();
      }),
    );
    await Promise.race([twoFrames, exited]);
    const tookMs = Date.now() - started;
    child.kill('SIGINT');
    expect(await exited).toEqual({ code: 0, signal: null });
    expect(frames()).toBeGreaterThanOrEqual(2);
    expect(out.match(/^streaminfer http:/gm)?.length).toBe(frames());
    // Not a terminal: frames follow each other without escape codes.
    expect(out).not.toContain('\x1b[');
    // The second frame's window is the full interval (the first is at most 1 s).
    const windows = [...out.matchAll(/^requests over the last (\d+\.\d) s/gm)].map((m) => Number(m[1]));
    expect(windows[1]).toBeGreaterThanOrEqual(0.9);
    expect(windows[1]).toBeLessThan(2);
    console.log(`two --watch 1 frames after ${tookMs} ms; windows ${windows.join(', ')} s`);
  });

  test('a wrong or missing admin token: one line naming the fix, exit 1', async () => {
    for (const token of [['--token', 'wrong'], []]) {
      const status = await runCliToExit(['status', '--port', String(server.adminPort), ...token], {
        STREAMINFER_ADMIN_TOKEN: '',
      });
      expect(status.code).toBe(1);
      expect(status.out).toMatch(
        /^streaminfer status: GET \/api\/reload: 401 unauthorized: .* \(give the admin token with --token or STREAMINFER_ADMIN_TOKEN\)\n$/,
      );
    }
  });
});

test('streaminfer status with no server there: one line with the cause, non-zero exit', async () => {
  const port = await closedPort();
  for (const watch of [[], ['--watch', '1']]) {
    const status = await runCliToExit(['status', '--port', String(port), ...watch]);
    expect(status.code).not.toBe(0);
    expect(status.out).toBe(
      `streaminfer: cannot reach StreamInfer at http://127.0.0.1:${port}: connect ECONNREFUSED 127.0.0.1:${port}\n`,
    );
  }
});
