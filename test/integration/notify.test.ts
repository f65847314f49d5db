/**
 * systemd notify and watchdog against a fake notify socket (PID 1 here is not systemd): the real server is
 * started with NOTIFY_SOCKET pointing at a datagram socket this test binds, and every datagram is recorded.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { DgramSocket } from 'node-unix-socket';
import { postJson, runCliToExit, type ServerHandle, sleep, startServer } from './harness';

interface Datagram {
  at: number;
  fields: Map<string, string>;
}

function parse(text: string): Map<string, string> {
  const fields = new Map<string, string>();
  for (const line of text.split('\n')) {
    const eq = line.indexOf('=');
    if (eq > 0) fields.set(line.slice(0, eq), line.slice(eq + 1));
  }
  return fields;
}

/** The datagrams a fake systemd received, with helpers to wait for and read the protocol's events. */
class Received {
  readonly all: Datagram[] = [];

  push(text: string): void {
    this.all.push({ at: Date.now(), fields: parse(text) });
  }

  /** The lifecycle events in order (READY, RELOADING, STOPPING), the way systemd reads them. */
  events(): string[] {
    const events: string[] = [];
    for (const { fields } of this.all)
      for (const key of ['READY', 'RELOADING', 'STOPPING']) if (fields.get(key) === '1') events.push(key);
    return events;
  }

  count(key: string, from = 0, to = Number.POSITIVE_INFINITY): number {
    return this.all.filter((d) => d.fields.has(key) && d.at >= from && d.at <= to).length;
  }

  async until(what: string, check: () => boolean, timeoutMs = 30000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!check()) {
      if (Date.now() > deadline)
        throw new Error(
          `timed out waiting for ${what}; received:\n${this.all.map((d) => JSON.stringify([...d.fields])).join('\n')}`,
        );
      await sleep(25);
    }
  }
}

/** A fake notify socket at a path, bound with node-unix-socket (what the server sends with). */
function pathSocket(): { address: string; received: Received; close: () => void } {
  const address = path.join(mkdtempSync(path.join(os.tmpdir(), 'streaminfer-notify-')), 'notify.sock');
  const socket = new DgramSocket();
  socket.bind(address);
  const received = new Received();
  socket.on('data', (buffer: Buffer) => received.push(buffer.toString()));
  return { address, received, close: () => socket.close() };
}

describe('systemd notify at a socket path', () => {
  let server: ServerHandle;
  let fake: ReturnType<typeof pathSocket>;
  beforeAll(async () => {
    fake = pathSocket();
    server = await startServer({
      models: ['echo'],
      args: ['--nodes', '2', '--workers', '1'],
      // WatchdogSec=1: a ping every 500 ms.
      env: { NOTIFY_SOCKET: fake.address, WATCHDOG_USEC: '1000000' },
    });
  });
  afterAll(async () => {
    await server.stop('SIGKILL');
    fake.close();
  });

  test('READY once every node is ready, with a STATUS line; the nodes get no NOTIFY_SOCKET', async () => {
    await fake.received.until('READY=1', () => fake.received.events().includes('READY'));
    expect(fake.received.events()).toEqual(['READY']);
    const ready = fake.received.all.find((d) => d.fields.get('READY') === '1')!;
    // requests/s is 0.0 once two heartbeats ran during the start, '-' before.
    expect(ready.fields.get('STATUS')).toMatch(/^ready; nodes ready 2\/2; epoch 0; requests\/s (-|0\.0)$/);
    // The start timeout was extended while the models loaded.
    expect(fake.received.all[0]!.fields.get('EXTEND_TIMEOUT_USEC')).toBe('15000000');
    for (const pid of server.nodePids) {
      const environ = spawnSync('cat', [`/proc/${pid}/environ`]).stdout.toString();
      expect(environ).not.toContain('NOTIFY_SOCKET=');
      expect(environ).not.toContain('WATCHDOG_USEC=');
    }
  });

  test('reload --wait: RELOADING=1 with MONOTONIC_USEC, then READY=1; the CLI returns once ready', async () => {
    const before = process.hrtime.bigint() / 1000n;
    const reload = await runCliToExit(['reload', '--wait', '--url', server.adminUrl]);
    const after = process.hrtime.bigint() / 1000n;
    expect(reload.out).toMatch(/reload \d+: committed/);
    expect(reload.out).toMatch(/ready again after \d+ ms/);
    expect(reload.code).toBe(0);
    expect(fake.received.events()).toEqual(['READY', 'RELOADING', 'READY']);
    const reloading = fake.received.all.find((d) => d.fields.get('RELOADING') === '1')!;
    // The same clock as this process's hrtime (CLOCK_MONOTONIC), read between the two samples.
    const usec = BigInt(reloading.fields.get('MONOTONIC_USEC')!);
    expect(usec >= before && usec <= after).toBe(true);
    expect(reloading.fields.get('EXTEND_TIMEOUT_USEC')).toBe('15000000');
  });

  test('a failed reload: --wait exits non-zero with the reason; systemd still hears READY=1 (aborted)', async () => {
    expect(
      (await postJson(`${server.adminUrl}/api/debug/fail-step`, { node: 1, step: 'prepare' })).status,
    ).toBe(200);
    const reload = await runCliToExit(['reload', '--wait', '--url', server.adminUrl]);
    expect(reload.code).toBe(1);
    expect(reload.out).toContain('injected failure of prepare');
    await fake.received.until('READY after the aborted reload', () => fake.received.events().length === 5);
    expect(fake.received.events()).toEqual(['READY', 'RELOADING', 'READY', 'RELOADING', 'READY']);
    const last = fake.received.all.filter((d) => d.fields.get('READY') === '1').at(-1)!;
    expect(last.fields.get('STATUS')).toContain('last reload failed: prepare failed, nothing changed');
  });

  test('WATCHDOG=1 every WATCHDOG_USEC/2 while every node answers; STATUS= counts requests/s', async () => {
    const from = Date.now();
    let answered = 0;
    while (Date.now() - from < 2100) {
      const response = await postJson(`${server.url}/predict`, {
        id: answered,
        model: 'echo',
        input: [answered],
      });
      expect(response.status).toBe(200);
      answered++;
    }
    const rates = fake.received.all
      .filter((d) => d.at >= from)
      .map((d) => /requests\/s ([0-9.]+)/.exec(d.fields.get('STATUS') ?? '')?.[1])
      .filter((rate) => rate !== undefined)
      .map(Number);
    expect(Math.max(...rates)).toBeGreaterThan(0);
    // A rate is never more than what was sent (per second, over at least one 0.5 s heartbeat).
    expect(Math.max(...rates)).toBeLessThanOrEqual(answered / 0.5);
    // 500 ms apart: 4 in 2.1 s, give or take a tick on a loaded machine.
    expect(fake.received.count('WATCHDOG', from)).toBeGreaterThanOrEqual(3);
    expect(fake.received.count('WATCHDOG', from)).toBeLessThanOrEqual(5);
  });

  test('a node whose event loop is blocked stops the pings; the supervisor keeps talking, pings resume', async () => {
    const blockMs = 3500;
    const blocked = Date.now();
    // Not awaited: if this connection landed on node 1, its answer waits for the block to end.
    const hook = postJson(`${server.adminUrl}/api/debug/block-node`, { node: 1, ms: blockMs });
    await fake.received.until('STATUS naming the wedged node', () =>
      fake.received.all.some(
        (d) => d.at >= blocked && d.fields.get('STATUS')?.includes('unresponsive: node 1'),
      ),
    );
    const noticed = Date.now();
    expect(noticed - blocked).toBeLessThan(2500);
    await sleep(blocked + blockMs - 200 - Date.now());
    // From one tick after the block began to its end: not a single ping, though the supervisor sent STATUS.
    expect(fake.received.count('WATCHDOG', blocked + 1100, blocked + blockMs - 200)).toBe(0);
    expect((await hook).status).toBe(200);
    await fake.received.until(
      'WATCHDOG=1 again',
      () => fake.received.count('WATCHDOG', blocked + blockMs) > 0,
    );
    await fake.received.until('STATUS without the wedged node', () => {
      const statuses = fake.received.all.filter((d) => d.fields.has('STATUS'));
      return !statuses.at(-1)!.fields.get('STATUS')!.includes('unresponsive');
    });
  });

  test('SIGTERM: STOPPING=1 first, then the drain; the server exits 0', async () => {
    const stopped = server.stop('SIGTERM');
    await fake.received.until('STOPPING=1', () => fake.received.events().includes('STOPPING'));
    expect(await stopped).toEqual({ code: 0, signal: null });
    expect(fake.received.events()).toEqual(['READY', 'RELOADING', 'READY', 'RELOADING', 'READY', 'STOPPING']);
    const stopping = fake.received.all.find((d) => d.fields.get('STOPPING') === '1')!;
    expect(stopping.fields.get('EXTEND_TIMEOUT_USEC')).toBe('15000000');
    expect(stopping.fields.get('STATUS')).toMatch(/^stopping; /);
  });
});

/**
 * Unbound unix datagram sockets (type 0002, no path in /proc/net/unix) among a process's open files: a sender.
 * Bound ones are left out: node-unix-socket opens without O_CLOEXEC, so the server inherits this test's fake.
 */
function datagramSockets(pid: number): number {
  const inodes = new Set<string>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const target = readlinkSync(`/proc/${pid}/fd/${fd}`);
      const match = /^socket:\[(\d+)\]$/.exec(target);
      if (match) inodes.add(match[1]!);
    } catch {
      // closed meanwhile
    }
  }
  return readFileSync(`/proc/${pid}/net/unix`, 'utf8')
    .split('\n')
    .slice(1)
    .map((line) => line.trim().split(/\s+/))
    .filter((columns) => columns[4] === '0002' && columns.length === 7 && inodes.has(columns[6]!)).length;
}

describe('reload --wait', () => {
  test('waits past the outcome until every node is ready (a node restarting during the reload)', async () => {
    const server = await startServer({
      models: ['echo'],
      args: ['--nodes', '2', '--workers', '1'],
      // A restarted node takes 2.5 s to load: the reload (node 0 only) is over long before.
      env: { STREAMINFER_TEST_RESTART_LOAD_DELAY_MS: '2500' },
    });
    try {
      const old = server.nodePids[1]!;
      process.kill(old, 'SIGKILL');
      // The replacement process answers health (not ready yet): it is out of the reload's barrier.
      for (;;) {
        // A pooled keep-alive connection to the killed node fails: that is one more try.
        const health = (await fetch(`${server.url}/health`)
          .then((response) => response.json())
          .catch(() => undefined)) as { nodes: Array<{ pid?: number }> } | undefined;
        const pid = health?.nodes[1]?.pid;
        if (pid !== undefined && pid !== old) break;
        await sleep(50);
      }
      const reload = await runCliToExit(['reload', '--wait', '--json', '--url', server.adminUrl]);
      expect(reload.code).toBe(0);
      const answer = JSON.parse(reload.out.trim().split('\n').at(-1)!) as {
        result: string;
        duration_ms: number;
        ready_after_ms: number;
      };
      expect(answer.result).toBe('committed');
      expect(answer.ready_after_ms).toBeGreaterThan(answer.duration_ms + 500);
      expect((await fetch(`${server.url}/health`)).status).toBe(200);
    } finally {
      expect(await server.stop()).toEqual({ code: 0, signal: null });
    }
  });
});

describe('without NOTIFY_SOCKET', () => {
  test('no notify socket is even opened, WATCHDOG_USEC notwithstanding (the socket path case opens one)', async () => {
    const fake = pathSocket();
    const quiet = await startServer({ models: ['echo'], env: { WATCHDOG_USEC: '200000' } });
    const notifying = await startServer({
      models: ['echo'],
      env: { NOTIFY_SOCKET: fake.address, WATCHDOG_USEC: '200000' },
    });
    try {
      await fake.received.until('READY=1', () => fake.received.events().includes('READY'));
      expect(datagramSockets(quiet.pid)).toBe(0);
      expect(datagramSockets(notifying.pid)).toBe(1);
      expect(quiet.logs()).not.toContain('systemd notify enabled');
    } finally {
      expect(await quiet.stop()).toEqual({ code: 0, signal: null });
      expect(await notifying.stop()).toEqual({ code: 0, signal: null });
      fake.close();
    }
  });
});

describe('malformed variables', () => {
  test('a bad WATCHDOG_USEC turns off the watchdog, not READY; a bad NOTIFY_SOCKET turns off notify; both serve', async () => {
    const fake = pathSocket();
    const badWatchdog = await startServer({
      models: ['echo'],
      env: { NOTIFY_SOCKET: fake.address, WATCHDOG_USEC: 'soon' },
    });
    const badSocket = await startServer({ models: ['echo'], env: { NOTIFY_SOCKET: 'run/notify' } });
    try {
      await fake.received.until('READY=1', () => fake.received.events().includes('READY'));
      await sleep(600);
      expect(fake.received.count('WATCHDOG')).toBe(0);
      expect(badWatchdog.logs()).toMatch(/"code":"watchdog_invalid".*systemd watchdog disabled/);
      expect(badSocket.logs()).toMatch(/"code":"notify_socket_invalid".*systemd notify disabled/);
      expect((await fetch(`${badSocket.url}/health`)).status).toBe(200);
    } finally {
      expect(await badWatchdog.stop()).toEqual({ code: 0, signal: null });
      expect(await badSocket.stop()).toEqual({ code: 0, signal: null });
      fake.close();
    }
  });
});

/**
 * An abstract socket has no file: its name is the exact bytes after a NUL. node-unix-socket cannot bind one at
 * its exact length (it passes all of sun_path), so the fake is a Python datagram socket; the server sends
 * through systemd-notify.
 */
const RECEIVER = `
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind('\\0' + sys.argv[1])
print('bound', flush=True)
while True:
    print(json.dumps(s.recv(65536).decode()), flush=True)
`;
const tools = {
  python: spawnSync('python3', ['--version']).status === 0,
  notify: spawnSync('systemd-notify', ['--version']).status === 0,
};

describe('systemd notify at an abstract socket (@name)', () => {
  (tools.python ? test : test.skip)(
    tools.notify
      ? 'READY=1 … STOPPING=1 arrive through systemd-notify'
      : 'without systemd-notify, the server says why nothing is sent and still serves',
    async () => {
      const name = `streaminfer-test-${process.pid}-${Date.now()}`;
      const receiver: ChildProcess = spawn('python3', ['-c', RECEIVER, name], {
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      const received = new Received();
      let buffered = '';
      const bound = new Promise<void>((resolve) =>
        receiver.stdout!.on('data', (chunk: Buffer) => {
          buffered += chunk.toString();
          const lines = buffered.split('\n');
          buffered = lines.pop()!;
          for (const line of lines) {
            if (line === 'bound') resolve();
            else received.push(JSON.parse(line) as string);
          }
        }),
      );
      await bound;
      const server = await startServer({ models: ['echo'], env: { NOTIFY_SOCKET: `@${name}` } });
      try {
        if (!tools.notify) {
          expect(server.logs()).toContain('systemd-notify is not installed');
          return;
        }
        await received.until('READY=1', () => received.events().includes('READY'));
        expect(server.logs()).toContain('"via":"systemd-notify"');
        const stopped = server.stop('SIGTERM');
        await received.until('STOPPING=1', () => received.events().includes('STOPPING'));
        expect(await stopped).toEqual({ code: 0, signal: null });
        expect(received.events()).toEqual(['READY', 'STOPPING']);
      } finally {
        await server.stop('SIGKILL');
        receiver.kill();
      }
    },
  );
});
