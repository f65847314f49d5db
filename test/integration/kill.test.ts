/**
 * Fault suite: `kill -9` of a node under load, of a node while a reload commits, and of the supervisor.
 * Clients are real WebSockets; which node a connection landed on is read from /health (ws_connections).
 */
import { copyFileSync, mkdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import * as path from 'node:path';
import WebSocket from 'ws';
import type { Answer, ServerHandle } from './harness';
import { modelsSubset, postJson, sleep, startServer, WsClient } from './harness';

interface NodeView {
  node: number;
  pid?: number;
  state: string;
  ws_connections?: number;
}

interface Health {
  ready: boolean;
  epoch: number;
  nodes: NodeView[];
}

/** /health; a kept-alive HTTP connection that was on the killed node is reset, so one retry on a fresh one. */
async function health(server: ServerHandle): Promise<Health> {
  try {
    return (await (await fetch(`${server.url}/health`)).json()) as Health;
  } catch {
    await sleep(10);
    return (await (await fetch(`${server.url}/health`)).json()) as Health;
  }
}

async function waitFor<T>(what: string, check: () => Promise<T | undefined>, timeoutMs: number): Promise<T> {
  const until = Date.now() + timeoutMs;
  while (Date.now() < until) {
    const value = await check();
    if (value !== undefined) return value;
    await sleep(20);
  }
  throw new Error(`${what}: not within ${timeoutMs} ms`);
}

function connections(view: Health): number[] {
  return view.nodes.map((node) => node.ws_connections ?? 0);
}

/** Opens a WebSocket and says which node took it (the one whose ws_connections grew). */
async function connectTracked(server: ServerHandle): Promise<{ socket: WebSocket; node: number }> {
  const before = connections(await health(server));
  const socket = await openSocket(server.wsUrl);
  const node = await waitFor(
    'the new connection shows in /health',
    async () => {
      const after = connections(await health(server));
      const grown = after.findIndex((count, i) => count > (before[i] ?? 0));
      return grown >= 0 ? grown : undefined;
    },
    2000,
  );
  return { socket, node };
}

function openSocket(url: string): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(url);
    socket.once('open', () => resolve(socket));
    socket.once('error', reject);
  });
}

const expected = (text: string) => text.toUpperCase();

/** Load that a failed test left running is stopped after it, so the run ends. */
const running = new Set<{ abort(): void }>();
afterEach(() => {
  for (const load of running) load.abort();
  running.clear();
});

/**
 * One client streaming `upper` requests, `depth` in flight, checking every answer. When its connection
 * drops it reconnects at once (retrying every 5 ms) and goes on; requests lost with the connection are counted.
 */
class LoadClient {
  sent = 0;
  answered = 0;
  readonly errors: string[] = [];
  drops = 0;
  lost = 0;
  readonly reconnectMs: number[] = [];
  private socket: WebSocket;
  private readonly pending = new Map<number, string>();
  private nextId = 0;
  private stopped = false;
  private settled: (() => void) | undefined;

  constructor(
    private readonly url: string,
    socket: WebSocket,
    readonly node: number,
    private readonly depth = 4,
  ) {
    this.socket = socket;
    running.add(this);
    this.attach();
  }

  private attach(): void {
    const socket = this.socket;
    socket.on('message', (data) => this.onAnswer(JSON.parse(data.toString()) as Answer));
    socket.on('close', () => void this.onClose(socket));
    socket.on('error', () => undefined);
    for (let i = 0; i < this.depth; i++) this.send();
  }

  private send(): void {
    if (this.stopped || this.socket.readyState !== WebSocket.OPEN) return;
    const id = this.nextId++;
    const text = `k${id % 997}x`;
    this.pending.set(id, text);
    this.sent++;
    this.socket.send(JSON.stringify({ id, model: 'upper', text }));
  }

  private onAnswer(answer: Answer): void {
    const text = this.pending.get(answer.id as number);
    if (text === undefined) {
      this.errors.push(`unmatched answer ${JSON.stringify(answer)}`);
      return;
    }
    this.pending.delete(answer.id as number);
    this.answered++;
    if (answer.type === 'error') this.errors.push(`${answer.code}: ${answer.message}`);
    else if (answer.result !== expected(text)) this.errors.push(`wrong result ${JSON.stringify(answer)}`);
    if (this.stopped && this.pending.size === 0) this.settled?.();
    this.send();
  }

  private async onClose(socket: WebSocket): Promise<void> {
    if (this.stopped || socket !== this.socket) return;
    const droppedAt = performance.now();
    this.drops++;
    this.lost += this.pending.size;
    this.pending.clear();
    for (;;) {
      if (this.stopped) return;
      try {
        this.socket = await openSocket(this.url);
        break;
      } catch {
        await sleep(5);
      }
    }
    this.reconnectMs.push(performance.now() - droppedAt);
    this.attach();
  }

  /** Stops at once, answered or not (cleanup after a failed test). */
  abort(): void {
    this.stopped = true;
    this.settled?.();
    this.socket.terminate();
  }

  /** Stops sending; resolves when every request in flight is answered. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.pending.size > 0) await new Promise<void>((resolve) => (this.settled = resolve));
    this.socket.close();
  }
}

/** Fresh connections, one request each, all the time: whatever node accepts one must answer it correctly. */
function probe(server: ServerHandle, model: string) {
  const answers: Answer[] = [];
  let refused = 0;
  let dropped = 0;
  let stop = false;
  const loop = (async () => {
    let id = 0;
    while (!stop) {
      let client: WsClient;
      try {
        client = await WsClient.connect(server.wsUrl);
      } catch {
        refused++;
        await sleep(5);
        continue;
      }
      const text = `p${id}`;
      const answer = await Promise.race([
        client.request({ id: id++, model, text }, 5000),
        client.closed.then(() => undefined),
      ]).catch(() => undefined);
      if (answer) answers.push(answer);
      else dropped++;
      client.close();
      await sleep(5);
    }
  })();
  const handle = {
    answers,
    abort() {
      stop = true;
    },
    async stop() {
      stop = true;
      await loop;
      return { refused, dropped };
    },
  };
  running.add(handle);
  return handle;
}

describe('kill -9 of one node under load (--nodes 2)', () => {
  let server: ServerHandle;
  afterAll(async () => {
    expect(await server.stop()).toEqual({ code: 0, signal: null });
  });

  test('the other node sees nothing, the killed node clients reconnect at once, the node is back loaded', async () => {
    server = await startServer({ models: ['echo', 'upper'], args: ['--nodes', '2', '--workers', '1'] });
    const before = await health(server);
    expect(before.ready).toBe(true);
    // At least three clients on each node (SO_REUSEPORT spreads connections; stop after 40).
    const clients: LoadClient[] = [];
    while (clients.length < 40) {
      const { socket, node } = await connectTracked(server);
      clients.push(new LoadClient(server.wsUrl, socket, node));
      const on = [0, 1].map((n) => clients.filter((client) => client.node === n).length);
      if (clients.length >= 12 && on.every((count) => count >= 3)) break;
    }
    const survivors = clients.filter((client) => client.node === 0);
    const victims = clients.filter((client) => client.node === 1);
    expect(survivors.length).toBeGreaterThanOrEqual(3);
    expect(victims.length).toBeGreaterThanOrEqual(3);
    const prober = probe(server, 'upper');
    await sleep(500);

    const killedPid = before.nodes[1]!.pid!;
    const killedAt = performance.now();
    process.kill(killedPid, 'SIGKILL');
    const back = await waitFor(
      'node 1 back and ready',
      async () => {
        const view = await health(server);
        const node = view.nodes[1];
        return view.ready && node?.pid !== undefined && node.pid !== killedPid && node.state === 'ready'
          ? view
          : undefined;
      },
      15000,
    );
    const backMs = performance.now() - killedAt;
    expect(back.epoch).toBe(before.epoch);
    await sleep(200);
    const probed = await prober.stop();

    // Right away, a connection that lands on the restarted node is answered correctly.
    let onRestarted: WebSocket | undefined;
    const tried: WebSocket[] = [];
    for (let i = 0; i < 40 && !onRestarted; i++) {
      const { socket, node } = await connectTracked(server);
      tried.push(socket);
      if (node === 1) onRestarted = socket;
    }
    expect(onRestarted).toBeDefined();
    const direct = new LoadClient(server.wsUrl, onRestarted!, 1, 1);
    await sleep(300);
    await direct.stop();
    for (const socket of tried) socket.close();

    await Promise.all(clients.map((client) => client.stop()));

    const sum = (list: LoadClient[], pick: (client: LoadClient) => number) =>
      list.reduce((total, client) => total + pick(client), 0);
    const reconnects = victims.flatMap((client) => client.reconnectMs);
    const figures = {
      clients: { node0: survivors.length, node1: victims.length },
      sent: sum(clients, (c) => c.sent),
      answered: sum(clients, (c) => c.answered),
      lostWithTheKilledNode: sum(victims, (c) => c.lost),
      otherNodeErrors: sum(survivors, (c) => c.errors.length),
      otherNodeDrops: sum(survivors, (c) => c.drops),
      reconnectMsMax: Math.round(Math.max(...reconnects) * 10) / 10,
      reconnectMsMedian: Math.round(reconnects.sort((a, b) => a - b)[reconnects.length >> 1]! * 10) / 10,
      nodeBackMs: Math.round(backMs),
      restartedNodeAnswered: direct.answered,
      probes: probed,
      probeAnswers: prober.answers.length,
    };
    console.log(`kill -9 node under load: ${JSON.stringify(figures)}`);

    for (const client of survivors) {
      expect(client.errors).toEqual([]);
      expect(client.drops).toBe(0);
      expect(client.answered).toBe(client.sent);
    }
    for (const client of victims) {
      expect(client.errors).toEqual([]);
      expect(client.drops).toBe(1);
      expect(client.reconnectMs).toHaveLength(1);
      expect(client.answered + client.lost).toBe(client.sent);
    }
    expect(figures.reconnectMsMax).toBeLessThan(1000);
    expect(backMs).toBeLessThan(10000);
    expect(direct.errors).toEqual([]);
    expect(direct.answered).toBeGreaterThan(0);
    // No probe ever got an error (unknown_model from a node without its models, or anything else).
    expect(prober.answers.filter((answer) => answer.type === 'error')).toEqual([]);
    expect(prober.answers.length).toBeGreaterThan(0);
  });
});

describe('a node restarting while a reload commits', () => {
  test('it takes no traffic until loaded, and comes up at the table and epoch the reload left', async () => {
    const dir = modelsSubset([], ['upper']);
    // The restarted node loads slowly (test hook), so the reload surely commits while it is not ready.
    const server = await startServer({
      modelsDir: dir,
      args: ['--nodes', '2', '--workers', '1', '--model', 'upper'],
      env: { STREAMINFER_TEST_RESTART_LOAD_DELAY_MS: '1500' },
    });
    try {
      const before = await health(server);
      mkdirSync(path.join(dir, 'upper', '2'));
      copyFileSync(path.join(dir, 'upper', '1', 'model.onnx'), path.join(dir, 'upper', '2', 'model.onnx'));
      const prober = probe(server, 'upper');
      const killedPid = before.nodes[1]!.pid!;
      process.kill(killedPid, 'SIGKILL');
      await waitFor(
        'node 1 restarted and loading',
        async () => {
          const node = (await health(server)).nodes[1];
          return node?.pid !== undefined && node.pid !== killedPid && node.state === 'starting'
            ? true
            : undefined;
        },
        10000,
      );
      const reload = await postJson(`${server.adminUrl}/api/reload`, { model: 'upper', version: '2' });
      expect(reload.status).toBe(200);
      expect(reload.body.epoch).toBe(before.epoch + 1);
      const back = await waitFor(
        'node 1 back',
        async () => {
          const view = await health(server);
          return view.ready ? view : undefined;
        },
        15000,
      );
      expect(back.epoch).toBe(before.epoch + 1);
      const probed = await prober.stop();
      const errors = prober.answers.filter((answer) => answer.type === 'error');
      const byVersion = prober.answers.reduce<Record<string, number>>((counts, answer) => {
        counts[answer.version ?? '?'] = (counts[answer.version ?? '?'] ?? 0) + 1;
        return counts;
      }, {});
      console.log(
        `reload during restart: ${JSON.stringify({ probeAnswers: prober.answers.length, byVersion, ...probed })}`,
      );
      expect(errors).toEqual([]);

      // Connections on the restarted node get the new version at the new epoch.
      const sockets: WebSocket[] = [];
      let onRestarted: WebSocket | undefined;
      for (let i = 0; i < 40 && !onRestarted; i++) {
        const { socket, node } = await connectTracked(server);
        sockets.push(socket);
        if (node === 1) onRestarted = socket;
      }
      expect(onRestarted).toBeDefined();
      const answer = await new Promise<Answer>((resolve) => {
        onRestarted!.once('message', (data) => resolve(JSON.parse(data.toString()) as Answer));
        onRestarted!.send(JSON.stringify({ id: 1, model: 'upper', text: 'b' }));
      });
      expect(answer).toMatchObject({ result: 'B', version: '2', epoch: before.epoch + 1 });
      for (const socket of sockets) socket.close();
      expect(server.logs()).toContain('syncing it before it listens');
    } finally {
      expect(await server.stop()).toEqual({ code: 0, signal: null });
    }
  });
});

describe('kill -9 of a lone node started on --port 0', () => {
  test('it comes back on the port the kernel picked at the first start, with its models loaded', async () => {
    const server = await startServer({
      models: ['upper'],
      args: ['--nodes', '1', '--workers', '1', '--model', 'upper'],
    });
    try {
      const killedPid = server.nodePids[0]!;
      const killedAt = performance.now();
      process.kill(killedPid, 'SIGKILL');
      const back = await waitFor(
        'the node back',
        async () => {
          try {
            const view = await health(server);
            return view.ready && view.nodes[0]?.pid !== killedPid ? view : undefined;
          } catch {
            return undefined; // nothing listens while the only node restarts
          }
        },
        15000,
      );
      console.log(
        `kill -9 lone node: ${JSON.stringify({ nodeBackMs: Math.round(performance.now() - killedAt) })}`,
      );
      expect(back.nodes[0]!.state).toBe('ready');
      const client = await WsClient.connect(server.wsUrl);
      expect(await client.request({ id: 1, model: 'upper', text: 'lone' })).toMatchObject({ result: 'LONE' });
      client.close();
    } finally {
      expect(await server.stop()).toEqual({ code: 0, signal: null });
    }
  });
});

/** A pid is gone when it no longer exists or is a zombie nobody reaped yet (it holds no socket then). */
function gone(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return true;
  }
}

function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const probeServer = createServer();
    probeServer.once('error', () => resolve(false));
    probeServer.listen(port, '127.0.0.1', () => probeServer.close(() => resolve(true)));
  });
}

describe('kill -9 of the supervisor', () => {
  test('leaves no node behind and releases the port', async () => {
    const server = await startServer({ models: ['echo', 'upper'], args: ['--nodes', '2', '--workers', '1'] });
    const clients = await Promise.all(
      Array.from({ length: 4 }, async () => new LoadClient(server.wsUrl, await openSocket(server.wsUrl), -1)),
    );
    await sleep(300);
    expect(server.nodePids.every((pid) => !gone(pid))).toBe(true);
    const killedAt = performance.now();
    process.kill(server.pid, 'SIGKILL');
    await server.exited;
    const nodesGoneMs = await waitFor(
      'every node exits',
      async () => (server.nodePids.every(gone) ? performance.now() - killedAt : undefined),
      10000,
    );
    const portFreeMs = await waitFor(
      'the port is released',
      async () => ((await portFree(server.port)) ? performance.now() - killedAt : undefined),
      5000,
    );
    const drops = clients.reduce((total, client) => total + client.drops, 0);
    for (const client of clients) void client.stop();
    console.log(
      `kill -9 supervisor: ${JSON.stringify({ nodes: server.nodePids.length, nodesGoneMs: Math.round(nodesGoneMs), portFreeMs: Math.round(portFreeMs), clientDrops: drops })}`,
    );
    expect(nodesGoneMs).toBeLessThan(10000);
  });
});
