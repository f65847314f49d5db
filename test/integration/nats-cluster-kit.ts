/**
 * Three (or more) nats-servers forming one JetStream cluster, for tests. The nodes run on namespaces of a
 * netns-kit FleetNet: with `isolation: 'netns'` (root and `ip netns`) each node has an address of its own
 * (4222 clients, 6222 routes, 8222 monitoring) and `partition`/`heal` cut it off the bridge, clients and routes
 * alike; with `loopback` every node listens on 127.0.0.1 on free ports of its own and there are no partitions
 * (`available` false). `isolation` says which one a run got.
 *
 * The binary is the current release (STREAMINFER_NATS_SERVER_CURRENT, else scripts/nats-server.sh's cache) unless
 * `binary` says otherwise; Debian's 2.9 when the current one is not built (`version` says which ran).
 */
import { type ChildProcess, execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { CURRENT_NATS_SERVER, DEBIAN_NATS_SERVER } from './broker-kit';
import { createFleetNet, type FleetNet, type Isolation } from './netns-kit';

export { CURRENT_NATS_SERVER };

/** The current release when it is built, else Debian's (the cluster's `version` says which ran). */
export function clusterNatsServer(): string {
  return existsSync(CURRENT_NATS_SERVER) ? CURRENT_NATS_SERVER : DEBIAN_NATS_SERVER;
}

export interface NatsClusterOptions {
  /** The net the nodes run on (its namespaces `nodes[0..]`); default: a net of its own with one per node. */
  net?: FleetNet;
  /** Which of the net's namespaces hold a node (default 0, 1, 2). */
  nodes?: number[];
  isolation?: Isolation;
  binary?: string;
  /** Extra lines for every node's configuration (inside no block). */
  extraConfig?: string;
}

export interface NatsCluster {
  readonly isolation: Isolation;
  /** Partitions are real: false on loopback. */
  readonly available: boolean;
  readonly net: FleetNet;
  readonly binary: string;
  /** `nats-server --version` of the binary. */
  readonly version: string;
  readonly size: number;
  /** Node i's client URL. */
  url(i: number): string;
  /** Every node's client URL, comma-separated (what --cluster and nats.servers take). */
  readonly urls: string;
  /** `server_name` of node i (`n<i>`). */
  name(i: number): string;
  monitorUrl(i: number): string;
  running(i: number): boolean;
  /** GET /jsz on node i (query like `accounts=true&streams=true`); undefined when it does not answer. */
  jsz(i: number, query?: string): Promise<Record<string, unknown> | undefined>;
  /** The meta leader's index, as the running nodes report it; undefined while there is none. */
  metaLeader(): Promise<number | undefined>;
  /** The index of the node leading stream `stream` (KV bucket B: stream `KV_B`); undefined when none. */
  streamLeader(stream: string): Promise<number | undefined>;
  /** The node a client connection named `name` (or matching it) is on (monitoring /connz); undefined: none. */
  clientNode(name: string | RegExp): Promise<number | undefined>;
  /** Resolves once every running node answers /healthz 200, they agree on one meta leader, and it sees every running peer current. */
  waitReady(timeoutMs?: number): Promise<void>;
  /** Resolves once stream `stream` has a leader and every replica on a running node is current. */
  waitStreamReady(stream: string, timeoutMs?: number): Promise<void>;
  /** SIGKILL (default) or SIGTERM to node i; resolves on its exit. */
  kill(i: number, signal?: NodeJS.Signals): Promise<void>;
  /** Starts node i again on its own store directory and ports; resolves once it answers /healthz. */
  start(i: number): Promise<void>;
  /** Cuts node i off (netns only): clients and the other nodes see a black hole. */
  partition(i: number): void;
  heal(i: number): Promise<void>;
  log(i: number): string;
  destroy(): Promise<void>;
}

const CLIENT_PORT = 4222;
const ROUTE_PORT = 6222;
const MONITOR_PORT = 8222;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

function exited(child: ChildProcess, ms: number): Promise<boolean> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}

async function getJson(url: string): Promise<Record<string, unknown> | undefined> {
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(2000) });
    if (response.status !== 200) return undefined;
    return (await response.json()) as Record<string, unknown>;
  } catch {
    return undefined;
  }
}

interface StreamDetail {
  name: string;
  cluster?: { leader?: string; replicas?: { name: string; current: boolean }[] };
}

export async function startNatsCluster(options: NatsClusterOptions = {}): Promise<NatsCluster> {
  const indices = options.nodes ?? [0, 1, 2];
  const ownNet = options.net === undefined;
  const fleetNet =
    options.net ??
    (await createFleetNet({
      hosts: indices.length,
      prefix: 'nc',
      ...(options.isolation ? { isolation: options.isolation } : {}),
    }));
  const binary = options.binary ?? clusterNatsServer();
  const version = execFileSync(binary, ['--version'], { encoding: 'utf8' }).trim();
  const isNetns = fleetNet.isolation === 'netns';
  const size = indices.length;
  const dir = mkdtempSync(path.join(os.tmpdir(), 'streaminfer-nats-cluster-'));
  const ports: { client: number; route: number; monitor: number }[] = [];
  for (let k = 0; k < size; k++)
    ports.push(
      isNetns
        ? { client: CLIENT_PORT, route: ROUTE_PORT, monitor: MONITOR_PORT }
        : { client: await freePort(), route: await freePort(), monitor: await freePort() },
    );
  const address = (k: number) => fleetNet.address(indices[k]!);
  const children: (ChildProcess | undefined)[] = new Array(size).fill(undefined);
  const logs: string[] = new Array(size).fill('');
  const check = (k: number) => {
    if (!Number.isInteger(k) || k < 0 || k >= size) throw new Error(`no NATS node ${k} (0..${size - 1})`);
    return k;
  };

  for (let k = 0; k < size; k++) {
    mkdirSync(path.join(dir, `n${k}`, 'store'), { recursive: true });
    const routes = indices
      .map((_, j) => `nats-route://${address(j)}:${ports[j]!.route}`)
      .filter((_, j) => j !== k);
    writeFileSync(
      path.join(dir, `n${k}`, 'nats.conf'),
      [
        `server_name: n${k}`,
        `listen: "${address(k)}:${ports[k]!.client}"`,
        `http: "${address(k)}:${ports[k]!.monitor}"`,
        `jetstream { store_dir: "${path.join(dir, `n${k}`, 'store')}", max_memory_store: 64MB, max_file_store: 1GB }`,
        `cluster { name: streaminfer-test, listen: "${address(k)}:${ports[k]!.route}", routes: [${routes
          .map((route) => `"${route}"`)
          .join(', ')}] }`,
        options.extraConfig ?? '',
      ].join('\n'),
    );
  }

  const healthy = async (k: number) => {
    try {
      const response = await fetch(`http://${address(k)}:${ports[k]!.monitor}/healthz`, {
        signal: AbortSignal.timeout(2000),
      });
      return response.status === 200;
    } catch {
      return false;
    }
  };

  const launch = (k: number) => {
    const child = fleetNet.spawnIn(indices[k]!, binary, ['-c', path.join(dir, `n${k}`, 'nats.conf')]);
    children[k] = child;
    const append = (chunk: Buffer) => {
      logs[k] = (logs[k] + chunk.toString()).slice(-50_000);
    };
    child.stdout?.on('data', append);
    child.stderr?.on('data', append);
    child.once('exit', () => {
      if (children[k] === child) children[k] = undefined;
    });
  };

  const running = (k: number) => children[check(k)] !== undefined;

  const cluster: NatsCluster = {
    isolation: fleetNet.isolation,
    available: fleetNet.available,
    net: fleetNet,
    binary,
    version,
    size,
    url: (k) => `nats://${address(check(k))}:${ports[k]!.client}`,
    get urls() {
      return indices.map((_, k) => `nats://${address(k)}:${ports[k]!.client}`).join(',');
    },
    name: (k) => `n${check(k)}`,
    monitorUrl: (k) => `http://${address(check(k))}:${ports[k]!.monitor}`,
    running,
    jsz: (k, query = '') => getJson(`${cluster.monitorUrl(k)}/jsz${query ? `?${query}` : ''}`),
    async metaLeader() {
      for (let k = 0; k < size; k++) {
        if (!running(k)) continue;
        const meta = (await cluster.jsz(k))?.['meta_cluster'] as { leader?: string } | undefined;
        const leader = meta?.leader ? /^n(\d+)$/.exec(meta.leader)?.[1] : undefined;
        if (leader !== undefined) return Number(leader);
      }
      return undefined;
    },
    async streamLeader(stream) {
      for (let k = 0; k < size; k++) {
        if (!running(k)) continue;
        const leader = (await details(k, stream))?.cluster?.leader;
        const m = leader ? /^n(\d+)$/.exec(leader) : null;
        if (m) return Number(m[1]);
      }
      return undefined;
    },
    async clientNode(name) {
      for (let k = 0; k < size; k++) {
        if (!running(k)) continue;
        const connz = await getJson(`${cluster.monitorUrl(k)}/connz?limit=1024`);
        const connections = (connz?.['connections'] ?? []) as { name?: string }[];
        const named = (c: { name?: string }) =>
          typeof name === 'string' ? c.name === name : name.test(c.name ?? '');
        if (connections.some(named)) return k;
      }
      return undefined;
    },
    async waitReady(timeoutMs = 30_000) {
      const until = Date.now() + timeoutMs;
      for (;;) {
        const up = indices.map((_, k) => k).filter(running);
        const ok = (await Promise.all(up.map(healthy))).every(Boolean);
        const leaders = new Set<string | undefined>();
        for (const k of up)
          leaders.add(((await cluster.jsz(k))?.['meta_cluster'] as { leader?: string } | undefined)?.leader);
        const leader = leaders.size === 1 ? /^n(\d+)$/.exec([...leaders][0] ?? '')?.[1] : undefined;
        // The meta leader places R>1 assets only on peers it sees current: wait until it sees every running one.
        if (ok && leader !== undefined && running(Number(leader))) {
          const meta = (await cluster.jsz(Number(leader)))?.['meta_cluster'] as
            | { replicas?: { name: string; current?: boolean; offline?: boolean }[] }
            | undefined;
          const peers = (meta?.replicas ?? []).filter((r) =>
            running(Number(/^n(\d+)$/.exec(r.name)?.[1] ?? -1)),
          );
          if (peers.length === up.length - 1 && peers.every((r) => r.current && !r.offline)) return;
        }
        if (Date.now() > until)
          throw new Error(
            `NATS cluster not ready in ${timeoutMs} ms (leaders ${JSON.stringify([...leaders])}):\n${up
              .map((k) => `--- n${k}\n${logs[k]!.slice(-2000)}`)
              .join('\n')}`,
          );
        await sleep(200);
      }
    },
    async waitStreamReady(stream, timeoutMs = 30_000) {
      const until = Date.now() + timeoutMs;
      for (;;) {
        const leader = await cluster.streamLeader(stream);
        if (leader !== undefined) {
          const replicas = (await details(leader, stream))?.cluster?.replicas ?? [];
          const alive = replicas.filter((r) => running(Number(/^n(\d+)$/.exec(r.name)?.[1] ?? -1)));
          if (alive.every((r) => r.current)) return;
        }
        if (Date.now() > until) throw new Error(`stream ${stream} has no current leader in ${timeoutMs} ms`);
        await sleep(200);
      }
    },
    async kill(k, signal = 'SIGKILL') {
      const child = children[check(k)];
      if (!child?.pid) return;
      child.kill(signal);
      if (!(await exited(child, 10_000))) {
        child.kill('SIGKILL');
        await exited(child, 5000);
      }
    },
    async start(k) {
      if (running(k)) throw new Error(`NATS node n${k} is already running`);
      launch(k);
      const until = Date.now() + 20_000;
      while (!(await healthy(k))) {
        if (!running(k) || Date.now() > until)
          throw new Error(`NATS node n${k} did not start:\n${logs[k]!.slice(-3000)}`);
        await sleep(100);
      }
    },
    partition(k) {
      fleetNet.partition(indices[check(k)]!);
    },
    heal: (k) => fleetNet.heal(indices[check(k)]!),
    log: (k) => logs[check(k)]!,
    async destroy() {
      await Promise.all(indices.map((_, k) => cluster.kill(k, 'SIGTERM')));
      if (ownNet) await fleetNet.destroy();
      rmSync(dir, { recursive: true, force: true });
    },
  };

  // The stream's entry on node k (any account), with its raft group as that node sees it.
  async function details(k: number, stream: string): Promise<StreamDetail | undefined> {
    const jsz = await cluster.jsz(k, 'accounts=true&streams=true');
    const accounts = (jsz?.['account_details'] ?? []) as { stream_detail?: StreamDetail[] }[];
    for (const account of accounts)
      for (const detail of account.stream_detail ?? []) if (detail.name === stream) return detail;
    return undefined;
  }

  try {
    for (let k = 0; k < size; k++) launch(k);
    // A node answers /healthz only once JetStream is up, which needs a meta leader: wait for all together.
    await cluster.waitReady(60_000);
  } catch (err) {
    await cluster.destroy();
    throw err;
  }
  return cluster;
}
