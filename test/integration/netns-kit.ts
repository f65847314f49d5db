/**
 * Several StreamInfer hosts on one machine, each in a Linux network namespace with an address of its own, joined
 * by a bridge; nats-server runs in the root namespace on the bridge address, so every namespace reaches it and a
 * partitioned host loses it. Needs root (`ip netns`, veth, bridge); without that, `isolation: 'loopback'` gives
 * the same API with every host on 127.0.0.1 and a port of its own, and no partitions (`available` is false).
 *
 * Names carry the owner's pid (`<prefix><pid><letter>`), so a later run removes what a crashed one left.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { testNatsServer } from './broker-kit';

export type Isolation = 'netns' | 'loopback';

/** Each namespace has its own address: every host's admin listener takes the default port there. */
const NAMESPACE_ADMIN_PORT = 8001;

export interface FleetNetOptions {
  hosts: number;
  /** 1 to 3 lowercase letters: interface names are at most 15 characters (prefix, pid, letter, `h`, index). */
  prefix?: string;
  /** Default: `netns` where namespaces work, else `loopback`. */
  isolation?: Isolation;
  /** The port every host listens on in `netns` mode (each has its own address). Loopback: free ports. */
  hostPort?: number;
}

export interface SpawnInOptions {
  env?: Record<string, string>;
  cwd?: string;
}

export interface FleetNet {
  readonly isolation: Isolation;
  /** Namespaces and partitions are real: false in loopback mode, where `partition` throws. */
  readonly available: boolean;
  /** `<prefix><pid><letter>`: every namespace, link and temporary directory of this net starts with it. */
  readonly tag: string;
  readonly hosts: number;
  /** The bridge's address (the root namespace's side), where NATS listens; 127.0.0.1 in loopback mode. */
  readonly gateway: string;
  /** `nats://<gateway>:<port>`; throws before the first startNats. */
  readonly natsUrl: string;
  readonly natsStoreDir: string;
  address(i: number): string;
  port(i: number): number;
  /** Host i's admin listener port: 8001 in its own namespace, a free one of its own on loopback. */
  adminPort(i: number): number;
  /** `http://<address(i)>:<port(i)>` */
  url(i: number): string;
  /** The namespace's name (`ip netns exec <name> …`); undefined in loopback mode. */
  namespace(i: number): string | undefined;
  spawnIn(i: number, command: string, args: string[], options?: SpawnInOptions): ChildProcess;
  /** Whether a TCP connection from host i's namespace to host:port opens within timeoutMs. */
  canConnect(i: number, host: string, port: number, timeoutMs?: number): Promise<boolean>;
  /** Starts nats-server (JetStream) on the gateway; again after stopNats: the same port and store directory. */
  startNats(options?: { port?: number }): Promise<void>;
  /** SIGTERM, then waits for the exit (SIGKILL after 5 s). */
  stopNats(): Promise<void>;
  natsLog(): string;
  /** Cuts host i off the bridge: NATS and the clients see a black hole (no reset), both ways. */
  partition(i: number): void;
  /** Puts host i back and resolves once its link is up and forwarding. */
  heal(i: number): Promise<void>;
  /** Kills what it started (SIGTERM, SIGKILL after 2 s), deletes namespaces, links, temporary dirs. Idempotent. */
  destroy(): Promise<void>;
}

const TMP_PREFIX = 'streaminfer-netns-';
let kitCount = 0;
let probed: boolean | undefined;

function ip(...args: string[]): string {
  return execFileSync('ip', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

function ipQuiet(...args: string[]): void {
  try {
    ip(...args);
  } catch {
    // Already gone.
  }
}

/** Whether this process may create network namespaces (root, `ip` present). Cached. */
export function netnsAvailable(): boolean {
  if (probed !== undefined) return probed;
  const name = `siprobe${process.pid}`;
  try {
    ip('netns', 'add', name);
    ip('netns', 'del', name);
    probed = true;
  } catch {
    probed = false;
  }
  return probed;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function killQuiet(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // Already gone.
  }
}

/** Removes what runs with `prefix` left whose owning process is dead: processes, namespaces, links, tmp dirs. */
export function cleanStale(prefix: string): string[] {
  const owned = new RegExp(`^${prefix}(\\d+)[a-z]`);
  const stale = (name: string) => {
    const m = owned.exec(name);
    return m !== null && Number(m[1]) !== process.pid && !alive(Number(m[1]));
  };
  const removed: string[] = [];
  const tmpOwned = new RegExp(`${TMP_PREFIX}(${prefix}\\d+[a-z])-`);
  // A nats-server outlives a crashed test: find it by the store directory on its command line.
  for (const entry of readdirSync('/proc').filter((e) => /^\d+$/.test(e))) {
    let cmdline = '';
    try {
      cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8');
    } catch {
      continue;
    }
    const m = tmpOwned.exec(cmdline);
    if (m?.[1] && stale(m[1])) killQuiet(Number(entry), 'SIGKILL');
  }
  if (netnsAvailable()) {
    for (const line of ip('netns', 'list').split('\n')) {
      const name = line.split(' ')[0] ?? '';
      if (!stale(name)) continue;
      for (const pid of ip('netns', 'pids', name).split('\n').filter(Boolean))
        killQuiet(Number(pid), 'SIGKILL');
      ipQuiet('netns', 'del', name);
      removed.push(name);
    }
    for (const line of ip('-o', 'link', 'show').split('\n')) {
      const name = /^\d+: ([^:@]+)/.exec(line)?.[1] ?? '';
      if (!stale(name)) continue;
      ipQuiet('link', 'del', name);
      removed.push(name);
    }
  }
  for (const entry of readdirSync(os.tmpdir())) {
    const m = tmpOwned.exec(entry);
    if (!m?.[1] || !entry.startsWith(TMP_PREFIX) || !stale(m[1])) continue;
    rmSync(path.join(os.tmpdir(), entry), { recursive: true, force: true });
    removed.push(entry);
  }
  return removed;
}

/** A /24 in 10.128.0.0/9 derived from the tag's pid and letter that no local address or route uses. */
function freeSubnet(seed: number): string {
  const used = ip('-o', '-4', 'addr', 'show') + ip('-4', 'route', 'show');
  for (let k = 0; k < 512; k++) {
    const m = (seed + k * 7919) % 32768;
    const subnet = `10.${128 + (m >> 8)}.${m & 255}`;
    if (!used.includes(`${subnet}.`)) return subnet;
  }
  throw new Error('no free 10.128.0.0/9 subnet for the fleet bridge');
}

function freePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, host, () => {
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

/** The first line a NATS server sends is `INFO {…}`. */
function natsGreets(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, host);
    let text = '';
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(1000, () => done(false));
    socket.on('error', () => done(false));
    socket.on('data', (chunk) => {
      text += chunk.toString();
      if (text.includes('\n')) done(text.startsWith('INFO '));
    });
  });
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export async function createFleetNet(options: FleetNetOptions): Promise<FleetNet> {
  const { hosts } = options;
  const prefix = options.prefix ?? 'si';
  if (!/^[a-z]{1,3}$/.test(prefix)) throw new Error(`prefix must be 1 to 3 lowercase letters: ${prefix}`);
  if (!Number.isInteger(hosts) || hosts < 1 || hosts > 99) throw new Error(`hosts must be 1 to 99: ${hosts}`);
  if (kitCount >= 26) throw new Error('at most 26 fleet nets per process');
  const isolation = options.isolation ?? (netnsAvailable() ? 'netns' : 'loopback');
  if (isolation === 'netns' && !netnsAvailable()) throw new Error('network namespaces are not available');
  const letter = String.fromCharCode(97 + kitCount++);
  const tag = `${prefix}${process.pid}${letter}`;
  cleanStale(prefix);

  const isNetns = isolation === 'netns';
  const bridge = `${tag}b`;
  const hostVeth = (i: number) => `${tag}h${i}`;
  const nsVeth = (i: number) => `${tag}n${i}`;
  const nsName = (i: number) => `${tag}-${i}`;
  const children = new Set<ChildProcess>();
  const tmpDir = mkdtempSync(path.join(os.tmpdir(), `${TMP_PREFIX}${tag}-`));
  const natsStoreDir = path.join(tmpDir, 'nats');
  let nats: ChildProcess | undefined;
  let natsPort: number | undefined;
  let natsOut = '';
  let destroyed = false;

  const destroySync = () => {
    if (destroyed) return;
    destroyed = true;
    process.off('exit', destroySync);
    for (const child of [...children, ...(nats ? [nats] : [])])
      if (child.pid !== undefined && child.exitCode === null && child.signalCode === null)
        killQuiet(-child.pid, 'SIGKILL');
    if (isNetns) {
      for (let i = 0; i < hosts; i++) {
        let pids = '';
        try {
          pids = ip('netns', 'pids', nsName(i));
        } catch {
          // Never created.
        }
        for (const pid of pids.split('\n').filter(Boolean)) killQuiet(Number(pid), 'SIGKILL');
        ipQuiet('netns', 'del', nsName(i));
        ipQuiet('link', 'del', hostVeth(i));
      }
      ipQuiet('link', 'del', bridge);
    }
    rmSync(tmpDir, { recursive: true, force: true });
  };
  process.on('exit', destroySync);

  let gateway = '127.0.0.1';
  const addresses: string[] = [];
  const ports: number[] = [];
  const adminPorts: number[] = [];
  try {
    if (isNetns) {
      const subnet = freeSubnet(process.pid * 26 + letter.charCodeAt(0));
      gateway = `${subnet}.1`;
      // Bridged frames skip iptables/arptables (bridge-nf-call-* is 1 here): host firewall rules stay out of it.
      try {
        ip('link', 'add', bridge, 'type', 'bridge', 'nf_call_iptables', '0', 'nf_call_arptables', '0');
      } catch {
        ip('link', 'add', bridge, 'type', 'bridge');
      }
      ip('addr', 'add', `${gateway}/24`, 'dev', bridge);
      ip('link', 'set', bridge, 'up');
      for (let i = 0; i < hosts; i++) {
        addresses.push(`${subnet}.${11 + i}`);
        ports.push(options.hostPort ?? 8000);
        ip('netns', 'add', nsName(i));
        ip('link', 'add', hostVeth(i), 'type', 'veth', 'peer', 'name', nsVeth(i), 'netns', nsName(i));
        ip('link', 'set', hostVeth(i), 'master', bridge);
        ip('link', 'set', hostVeth(i), 'up');
        ip('-n', nsName(i), 'addr', 'add', `${addresses[i]}/24`, 'dev', nsVeth(i));
        ip('-n', nsName(i), 'link', 'set', nsVeth(i), 'up');
        ip('-n', nsName(i), 'link', 'set', 'lo', 'up');
      }
    } else {
      for (let i = 0; i < hosts; i++) {
        addresses.push('127.0.0.1');
        ports.push(await freePort('127.0.0.1'));
        adminPorts.push(await freePort('127.0.0.1'));
      }
    }
  } catch (err) {
    destroySync();
    throw err;
  }

  const check = (i: number) => {
    if (!Number.isInteger(i) || i < 0 || i >= hosts) throw new Error(`no host ${i} (0..${hosts - 1})`);
    if (destroyed) throw new Error(`fleet net ${tag} is destroyed`);
    return i;
  };

  const spawnIn = (i: number, command: string, args: string[], opts: SpawnInOptions = {}) => {
    check(i);
    const [file, argv] = isNetns ? ['ip', ['netns', 'exec', nsName(i), command, ...args]] : [command, args];
    // Its own process group: destroy() reaches what it starts in turn (a supervisor's nodes).
    const child = spawn(file, argv as string[], {
      env: { ...process.env, ...opts.env },
      cwd: opts.cwd,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    children.add(child);
    child.once('exit', () => children.delete(child));
    return child;
  };

  const linkUp = (i: number) =>
    ip('-n', nsName(i), '-o', 'link', 'show', 'dev', nsVeth(i)).includes('LOWER_UP') &&
    ip('-d', '-o', 'link', 'show', 'dev', hostVeth(i)).includes('state forwarding');

  const result: FleetNet = {
    isolation,
    available: isNetns,
    tag,
    hosts,
    gateway,
    natsStoreDir,
    get natsUrl() {
      if (natsPort === undefined) throw new Error('startNats() first');
      return `nats://${gateway}:${natsPort}`;
    },
    address: (i) => addresses[check(i)]!,
    port: (i) => ports[check(i)]!,
    adminPort: (i) => adminPorts[check(i)] ?? NAMESPACE_ADMIN_PORT,
    url: (i) => `http://${addresses[check(i)]}:${ports[i]}`,
    namespace: (i) => (isNetns ? nsName(check(i)) : undefined),
    spawnIn,
    async canConnect(i, host, port, timeoutMs = 1000) {
      const script =
        'const s=require("net").connect(+process.argv[2],process.argv[1]);' +
        `s.setTimeout(${timeoutMs},()=>process.exit(1));s.on("error",()=>process.exit(1));` +
        's.on("connect",()=>process.exit(0));';
      const child = spawnIn(i, process.execPath, ['-e', script, host, String(port)]);
      await exited(child, timeoutMs + 5000);
      return child.exitCode === 0;
    },
    async startNats(opts = {}) {
      if (destroyed) throw new Error(`fleet net ${tag} is destroyed`);
      if (nats) throw new Error('nats-server is already running');
      natsPort = opts.port ?? natsPort ?? (await freePort(gateway));
      natsOut = '';
      const args = ['-a', gateway, '-p', String(natsPort), '-js', '-sd', natsStoreDir];
      const child = spawn(testNatsServer(), args, { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
      nats = child;
      const append = (chunk: Buffer) => {
        natsOut = (natsOut + chunk.toString()).slice(-20_000);
      };
      child.stdout?.on('data', append);
      child.stderr?.on('data', append);
      child.once('exit', () => {
        if (nats === child) nats = undefined;
      });
      const deadline = Date.now() + 10_000;
      while (!(await natsGreets(gateway, natsPort))) {
        if (nats !== child || Date.now() > deadline) {
          if (child.pid !== undefined) killQuiet(-child.pid, 'SIGKILL');
          throw new Error(`nats-server did not start on ${gateway}:${natsPort}:\n${natsOut}`);
        }
        await sleep(50);
      }
    },
    async stopNats() {
      const child = nats;
      if (!child?.pid) return;
      killQuiet(child.pid, 'SIGTERM');
      if (!(await exited(child, 5000))) {
        killQuiet(child.pid, 'SIGKILL');
        await exited(child, 5000);
      }
    },
    natsLog: () => natsOut,
    partition(i) {
      check(i);
      if (!isNetns) throw new Error('partition needs network namespaces (this fleet net runs on loopback)');
      ip('link', 'set', hostVeth(i), 'down');
    },
    async heal(i) {
      check(i);
      if (!isNetns) throw new Error('heal needs network namespaces (this fleet net runs on loopback)');
      ip('link', 'set', hostVeth(i), 'up');
      const deadline = Date.now() + 5000;
      while (!linkUp(i)) {
        if (Date.now() > deadline) throw new Error(`host ${i}'s link did not come back up`);
        await sleep(20);
      }
    },
    async destroy() {
      if (destroyed) return;
      const running = [...children, ...(nats ? [nats] : [])];
      for (const child of running) if (child.pid !== undefined) killQuiet(-child.pid, 'SIGTERM');
      await Promise.all(running.map((child) => exited(child, 2000)));
      destroySync();
    },
  };
  return result;
}
