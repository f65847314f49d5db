/**
 * The node processes of one host: starts them, restarts a crashed one with backoff, brings a (re)starting node
 * to the host's table before it listens, asks one node or collects from all, and drains them on shutdown. It
 * knows the host's table only through HostTable (the reload coordinator) and answers control requests through
 * the callback it is given (the admin API).
 */
import { type ChildProcess, fork } from 'node:child_process';
import { lookup } from 'node:dns/promises';
import * as net from 'node:net';
import { createServer, isIP } from 'node:net';
import * as path from 'node:path';
import { getSystemErrorName } from 'node:util';
import type { Logger } from 'pino';
import type { RequestCount } from '../../libs/notify';
import { nextCrashStreak, restartDelayMs } from '../../libs/process';
import type { TablePlan, UnavailableModel } from '../../libs/registry';
import type { TenantDemand } from '../../libs/tenants';
import type {
  ControlRequest,
  ControlResponse,
  NodeHealth,
  NodeMessage,
  NodeStartOptions,
  SupervisorMessage,
} from '../node/ipc';
import type { NodeChannel, StepAnswer } from './coordinator';

const COLLECT_TIMEOUT_MS = 5000;
const START_TIMEOUT_MS = 120000;
const RESTART_POLL_MS = 50;
const JOIN_POLL_MS = 10;
/** The reload steps a test can script to fail (POST /api/debug/fail-step). */
export const FAILABLE_STEPS = ['prepare', 'commit', 'abort', 'release', 'roll'];

export interface NodeHandle {
  index: number;
  child: ChildProcess;
  /** At the host's table and epoch and taking part in every reload: set when the node is told to listen. */
  ready: boolean;
  /** Starts of this node slot after the first (what the node is told; test hooks act on restarts only). */
  restarts: number;
  /** Crashes in a row without a stable run between them: the restart backoff grows with it. */
  crashStreak: number;
  /** When the node was told to listen (undefined while it starts). */
  readySince: number | undefined;
  lastHealth: NodeHealth | undefined;
  /** The last liveness ping sent (NodeSet.heartbeat) and the last one answered. */
  pingSent: number | undefined;
  pongSeen: number;
  /** Requests this node had answered at its last pong. */
  answered: number | undefined;
}

/** The host's table as a (re)starting node must reach it: the reload coordinator. */
export interface HostTable {
  /** A reload is deciding the table: a joining node waits until it has. */
  readonly deciding: boolean;
  readonly epoch: number;
  readonly table: TablePlan;
}

export interface NodeSetOptions {
  logger: Logger;
  testHooks: boolean;
  /** Read at each use: a configuration reload changes both. */
  timeouts: () => { reloadStepMs: number; shutdownMs: number };
  host: () => HostTable;
  /** A node's start options but for the port and the restart count, which the node set adds. */
  startOptions: (index: number) => Omit<NodeStartOptions, 'port' | 'restarts'>;
  /**
   * A starting node could not load part of its start table. ok: the host's table no longer holds it (the
   * node is synced to that table before it listens); else the node is stopped and its start fails with `error`.
   */
  loadFailures?: (node: number, failures: UnavailableModel[]) => { ok: true } | { ok: false; error: string };
  /** Answers a control request a node received (never rejects). */
  control: (request: ControlRequest) => Promise<ControlResponse>;
  /** Tenants (--api-keys): a node process started, exited, is about to listen, reported its demand. */
  tenants?: {
    nodeStarted(node: number): void;
    nodeGone(node: number): void;
    beforeListen(): void;
    report(node: number, seq: number, tenants: Record<string, TenantDemand>): void;
  };
  /**
   * Mutual TLS: the nodes accept with node:tls, which (Node 20) cannot share a port through SO_REUSEPORT:
   * the node set binds the port once and hands every node that asks its listening socket.
   */
  sharedListener?: boolean;
}

export class NodeSet {
  readonly nodes: NodeHandle[] = [];
  private portNumber = 0;
  /** The host's listening socket when sharedListener (bound here, listened on by the nodes). */
  private listenHandle: SharedListenHandle | undefined;
  private stoppingNow = false;
  private readonly waiters = new Map<
    number,
    { node: number; answer: (message: NodeMessage | undefined) => void }
  >();
  private nextRequestId = 1;
  private pingSeq = 0;
  /** Test hooks: reload steps scripted to fail (`node:step` → calls to let through first, then calls to fail). */
  private readonly failSteps = new Map<string, { skip: number; times: number }>();

  constructor(private readonly options: NodeSetOptions) {}

  get port(): number {
    return this.portNumber;
  }

  get stopping(): boolean {
    return this.stoppingNow;
  }

  /** Starts node 0 first (it may pick the port when `port` is 0), then the others on the same port. */
  async start(count: number, port: number, host: string): Promise<number> {
    this.portNumber = port;
    // A port picked by the kernel (port 0) is not shared through SO_REUSEPORT, and a node restarted after a
    // graceful drain cannot bind it again (its old connections linger in TIME_WAIT): pick one first, always.
    if (this.portNumber === 0) this.portNumber = await pickFreePort(host);
    if (this.options.sharedListener) this.listenHandle = await bindSharedHandle(host, this.portNumber);
    await this.startNode(0, 0);
    await Promise.all(Array.from({ length: count - 1 }, (_, i) => this.startNode(i + 1, 0)));
    return this.portNumber;
  }

  private startNode(index: number, restarts: number, crashStreak = 0): Promise<void> {
    const logger = this.options.logger;
    // STREAMINFER_NODE_ARGS passes extra Node flags to node processes (profiling: "--cpu-prof --cpu-prof-dir=/tmp/p").
    const extraArgs = process.env.STREAMINFER_NODE_ARGS?.split(/\s+/).filter(Boolean) ?? [];
    const child = fork(path.join(__dirname, '../node/main.js'), [], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      serialization: 'advanced',
      execArgv: [...process.execArgv, ...extraArgs],
    });
    const handle: NodeHandle = {
      index,
      child,
      ready: false,
      restarts,
      crashStreak,
      readySince: undefined,
      lastHealth: undefined,
      pingSent: undefined,
      pongSeen: 0,
      answered: undefined,
    };
    this.nodes[index] = handle;
    this.options.tenants?.nodeStarted(index);
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`node ${index} did not become ready within ${START_TIMEOUT_MS / 1000}s`)),
        START_TIMEOUT_MS,
      );
      child.on('message', (message: NodeMessage) => {
        switch (message.type) {
          case 'loaded': {
            const failures = message.failures ?? [];
            if (failures.length === 0) {
              void this.join(handle, message.epoch);
              return;
            }
            const verdict = this.options.loadFailures?.(index, failures) ?? {
              ok: false as const,
              error: failures.map((failure) => failure.reason).join('; '),
            };
            if (verdict.ok) {
              // Its routes wait for the host's table without what it failed to load: synced even at its epoch.
              void this.join(handle, message.epoch, true);
              return;
            }
            clearTimeout(timer);
            reject(new Error(`node ${index} failed to start: ${verdict.error}`));
            child.kill('SIGKILL');
            return;
          }
          case 'listening':
            if (this.portNumber === 0) this.portNumber = message.port;
            return;
          case 'want-listen-handle':
            // Each start, and each resume after a roll: sending dups the socket; the node set keeps its own.
            if (this.listenHandle && child.connected)
              child.send({ type: 'listen-handle' } satisfies SupervisorMessage, this.listenHandle as never);
            return;
          case 'ready':
            handle.lastHealth = message.health;
            clearTimeout(timer);
            resolve();
            return;
          case 'start-failed':
            clearTimeout(timer);
            reject(new Error(`node ${index} failed to start: ${message.error}`));
            return;
          default:
            this.onNodeMessage(handle, message);
        }
      });
      // A message sent as the node dies fails with EPIPE as an 'error' event: unhandled, it would take the
      // supervisor down with it. The death itself is handled on 'exit'.
      child.on('error', (error: Error) =>
        logger.warn({ node: index, err: error.message }, 'node process error (IPC to a dying node)'),
      );
      child.on('exit', (code, signal) => {
        clearTimeout(timer);
        handle.ready = false;
        this.failWaitersOf(index);
        if (this.nodes[index] !== handle) return;
        this.options.tenants?.nodeGone(index);
        if (this.stoppingNow) return;
        reject(new Error(`node ${index} exited during start (code ${code}, signal ${signal})`));
        logger.error({ node: index, code, signal }, 'node exited; restarting');
        const streak = nextCrashStreak(
          handle.crashStreak,
          handle.readySince === undefined ? undefined : Date.now() - handle.readySince,
        );
        const delay = restartDelayMs(streak - 1);
        // Not unref'd: with --nodes 1 this timer is all that keeps the supervisor alive until the restart.
        setTimeout(() => {
          if (this.stoppingNow) return;
          this.startNode(index, handle.restarts + 1, streak).then(
            () => logger.info({ node: index }, 'node restarted'),
            (error: Error) => logger.error({ node: index, err: error.message }, 'node restart failed'),
          );
        }, delay);
      });
      child.send({
        type: 'start',
        options: { ...this.options.startOptions(index), port: this.portNumber, restarts },
      } satisfies SupervisorMessage);
    });
  }

  /**
   * A node has loaded its start table. If a reload committed meanwhile (it was not in that barrier), it is
   * moved to the current table first; it is told to listen only when no reload is deciding the table (one that
   * is restarting this very node has settled it) and its epoch is the host's, and it joins the barrier in that
   * same turn, so no reload can commit between the check and the join.
   */
  private async join(handle: NodeHandle, loadedEpoch: number, stale = false): Promise<void> {
    const host = this.options.host();
    let epoch = loadedEpoch;
    let synced = !stale;
    while (this.nodes[handle.index] === handle && handle.child.connected && !this.stoppingNow) {
      if (host.deciding) {
        await new Promise((resolve) => setTimeout(resolve, JOIN_POLL_MS));
        continue;
      }
      if (epoch === host.epoch && synced) {
        handle.ready = true;
        handle.readySince = Date.now();
        this.options.tenants?.beforeListen();
        this.sendTo(handle, { type: 'listen', port: this.portNumber });
        return;
      }
      const plan = host.table;
      const target = host.epoch;
      this.options.logger.info(
        { node: handle.index, from: epoch, to: target },
        epoch === target
          ? 'the node did not load all of its table: syncing it to the host table before it listens'
          : 'a reload committed while the node started: syncing it before it listens',
      );
      const answer = await this.step(handle, (requestId) => ({
        type: 'sync',
        requestId,
        plan,
        epoch: target,
      }));
      if (!answer.ok) {
        // It cannot serve the host's table: start it afresh on it (the exit handler restarts it).
        this.options.logger.error(
          { node: handle.index, err: answer.error },
          'node could not sync; restarting it',
        );
        handle.child.kill('SIGKILL');
        return;
      }
      epoch = target;
      synced = true;
    }
  }

  private onNodeMessage(handle: NodeHandle, message: NodeMessage): void {
    switch (message.type) {
      case 'control-request':
        void this.options
          .control(message.request)
          .then((response) =>
            this.sendTo(handle, { type: 'control-response', requestId: message.requestId, response }),
          );
        return;
      case 'collected':
      case 'command-result': {
        const waiter = this.waiters.get(message.requestId);
        this.waiters.delete(message.requestId);
        waiter?.answer(message);
        return;
      }
      case 'tenant-report':
        this.options.tenants?.report(handle.index, message.seq, message.tenants);
        return;
      case 'pong':
        handle.pongSeen = Math.max(handle.pongSeen, message.seq);
        handle.answered = message.answered;
        return;
      case 'drained':
        this.options.logger.info(
          { node: message.nodeIndex, answered: message.answered, abandoned: message.abandoned },
          'node drained',
        );
        return;
      default:
        return;
    }
  }

  /** Requests the nodes had answered at their last pong (a node restarted since counts from 0 again). */
  answeredTotal(): number {
    let total = 0;
    for (const handle of this.nodes) total += handle.answered ?? 0;
    return total;
  }

  /** The host was fenced from its fleet or rejoined it: every running node hears it (a starting one reads it in its options). */
  fence(reason: string | null): void {
    for (const handle of this.nodes) this.sendTo(handle, { type: 'fence', reason });
  }

  private sendTo(handle: NodeHandle, message: SupervisorMessage): void {
    if (handle.child.connected) handle.child.send(message);
  }

  /** A message to one node process; false when there is none to reach. */
  sendToNode(index: number, message: SupervisorMessage): boolean {
    const handle = this.nodes[index];
    if (!handle?.child.connected) return false;
    handle.child.send(message);
    return true;
  }

  /** Asks one node and waits for its answer; undefined on timeout or when the node dies first. */
  ask(
    handle: NodeHandle,
    build: (requestId: number) => SupervisorMessage,
    timeoutMs = COLLECT_TIMEOUT_MS,
  ): Promise<NodeMessage | undefined> {
    const requestId = this.nextRequestId++;
    return new Promise((resolve) => {
      if (!handle.child.connected) {
        resolve(undefined);
        return;
      }
      const timer = setTimeout(() => {
        this.waiters.delete(requestId);
        resolve(undefined);
      }, timeoutMs);
      this.waiters.set(requestId, {
        node: handle.index,
        answer: (message) => {
          clearTimeout(timer);
          resolve(message);
        },
      });
      handle.child.send(build(requestId));
    });
  }

  /** A node died: everything asked of it is answered "no answer" now, not at the timeout. */
  private failWaitersOf(nodeIndex: number): void {
    for (const [requestId, waiter] of this.waiters) {
      if (waiter.node !== nodeIndex) continue;
      this.waiters.delete(requestId);
      waiter.answer(undefined);
    }
  }

  /** Asks every node for its metrics or health, in node order (undefined: no answer). */
  collect(what: 'metrics' | 'health'): Promise<Array<NodeMessage | undefined>> {
    return Promise.all(
      this.nodes.map((handle) => this.ask(handle, (requestId) => ({ type: 'collect', requestId, what }))),
    );
  }

  /**
   * One liveness round: names the nodes whose event loop has not answered the previous ping, then pings the
   * others again. A process that is gone (restarting) is the restart path's business, not a wedged loop; a
   * wedged one is not pinged again, so its backlog stays one message.
   */
  heartbeat(): { unresponsive: number[]; counts: RequestCount[] } {
    const seq = ++this.pingSeq;
    const unresponsive: number[] = [];
    const counts: RequestCount[] = [];
    for (const handle of this.nodes) {
      if (!handle.child.connected) continue;
      if (handle.pingSent !== undefined && handle.pongSeen < handle.pingSent) {
        unresponsive.push(handle.index);
        continue;
      }
      if (handle.answered !== undefined && handle.child.pid !== undefined)
        counts.push({ node: handle.index, pid: handle.child.pid, answered: handle.answered });
      handle.pingSent = seq;
      this.sendTo(handle, { type: 'ping', seq });
    }
    return { unresponsive, counts };
  }

  /** Test hook: blocks one node's main event loop for `ms`; false when there is no such node. */
  blockNode(node: number, ms: number): boolean {
    const handle = this.nodes[node];
    if (!handle?.child.connected) return false;
    this.sendTo(handle, { type: 'block', ms });
    return true;
  }

  /** Test hook: crashes one worker of one node; false when there is no such node or worker. */
  async crashWorker(node: number, worker: number): Promise<boolean> {
    const handle = this.nodes[node];
    if (!handle) return false;
    const answer = await this.ask(handle, (requestId) => ({
      type: 'crash-worker',
      requestId,
      workerIndex: worker,
    }));
    return answer?.type === 'command-result' && answer.ok;
  }

  /** Test hook: the next `times` calls of `step` on `node`, after `skip` let through, fail. */
  failStep(node: number, step: string, script: { skip: number; times: number }): void {
    this.failSteps.set(`${node}:${step}`, script);
  }

  private async step(
    handle: NodeHandle,
    build: (requestId: number) => SupervisorMessage,
  ): Promise<StepAnswer> {
    if (this.options.testHooks) {
      const injected = this.injectedFailure(handle.index, build(0).type);
      if (injected) return injected;
    }
    // Loading sessions can take a while for big models; a node silent this long counts as failed.
    const answer = await this.ask(handle, build, this.options.timeouts().reloadStepMs);
    if (!answer) return { ok: false, error: 'no answer (the node died or timed out)' };
    if (answer.type !== 'command-result') return { ok: false, error: `unexpected answer ${answer.type}` };
    return answer.error === undefined
      ? { ok: answer.ok, data: answer.data }
      : { ok: answer.ok, error: answer.error, data: answer.data };
  }

  private injectedFailure(node: number, step: string): StepAnswer | undefined {
    const key = `${node}:${step}`;
    const script = this.failSteps.get(key);
    if (!script) return undefined;
    if (script.skip > 0) {
      script.skip--;
      return undefined;
    }
    if (--script.times <= 0) this.failSteps.delete(key);
    return { ok: false, error: `injected failure of ${step} (test hook)` };
  }

  /** The nodes in every reload's barrier: a node that is (re)starting joins at the table a reload leaves behind. */
  channels(): NodeChannel[] {
    return this.nodes.filter((handle) => handle.ready).map((handle) => this.channel(handle));
  }

  private channel(handle: NodeHandle): NodeChannel {
    return {
      index: handle.index,
      prepare: (plan) => this.step(handle, (requestId) => ({ type: 'prepare', requestId, plan })),
      commit: (plan, epoch) => this.step(handle, (requestId) => ({ type: 'commit', requestId, plan, epoch })),
      abort: () => this.step(handle, (requestId) => ({ type: 'abort', requestId })),
      release: (plan) => this.step(handle, (requestId) => ({ type: 'release', requestId, plan })),
      roll: (plan, epoch) => this.step(handle, (requestId) => ({ type: 'roll', requestId, plan, epoch })),
      restart: (reason) => this.restartNode(handle, reason),
    };
  }

  /**
   * Replaces a node that cannot reach the host's table: it drains (SIGTERM; SIGKILL once the shutdown grace is
   * over, e.g. when it is wedged) and the crash-restart path brings it up on the host's current table and
   * epoch. Resolves when the replacement is ready, or with the reason it is not.
   */
  private restartNode(handle: NodeHandle, reason: string): Promise<StepAnswer> {
    const index = handle.index;
    this.options.logger.warn({ node: index, reason }, 'restarting node onto the host table');
    const child = handle.child;
    const shutdownMs = this.options.timeouts().shutdownMs;
    if (child.exitCode === null && child.signalCode === null) {
      const grace = setTimeout(() => child.kill('SIGKILL'), shutdownMs + 1000);
      child.once('exit', () => clearTimeout(grace));
      child.kill('SIGTERM');
    }
    const deadline = Date.now() + START_TIMEOUT_MS + shutdownMs;
    return new Promise((resolve) => {
      const poll = (): void => {
        const current = this.nodes[index];
        if (current !== undefined && current !== handle && current.ready) {
          // A replacement that started before the host moved came up on the table it was given then.
          if (current.lastHealth?.epoch === this.options.host().epoch) resolve({ ok: true });
          else this.restartNode(current, `${reason}; came up at another epoch`).then(resolve);
        } else if (this.stoppingNow) resolve({ ok: false, error: 'the server is shutting down' });
        else if (Date.now() > deadline)
          resolve({ ok: false, error: `node ${index} was not ready again in time` });
        else setTimeout(poll, RESTART_POLL_MS);
      };
      poll();
    });
  }

  pids(): number[] {
    return this.nodes.map((handle) => handle.child.pid ?? -1);
  }

  /** Every node stops accepting, answers what it admitted, exits (SIGKILL after `graceMs`). */
  async shutdown(graceMs: number): Promise<void> {
    this.stoppingNow = true;
    await Promise.all(
      this.nodes.map(
        (handle) =>
          new Promise<void>((resolve) => {
            if (handle.child.exitCode !== null || handle.child.signalCode !== null) {
              resolve();
              return;
            }
            const timer = setTimeout(() => {
              this.options.logger.error({ node: handle.index }, 'node did not drain in time; killing it');
              handle.child.kill('SIGKILL');
            }, graceMs);
            handle.child.once('exit', () => {
              clearTimeout(timer);
              resolve();
            });
            this.sendTo(handle, { type: 'shutdown' });
          }),
      ),
    );
    this.listenHandle?.close();
    this.listenHandle = undefined;
  }
}

/** A bound TCP socket (libuv's handle) that is not accepted on here: only the nodes listen on it. */
interface SharedListenHandle {
  close(): void;
}

/**
 * Binds the host's port without accepting on it in this process: the way Node's own cluster module shares a
 * port (its shared-handle mode), through the same net._createServerHandle. Each node that gets the handle
 * listens and accepts on it; the kernel spreads connections over the nodes accepting at the time.
 */
async function bindSharedHandle(host: string, port: number): Promise<SharedListenHandle> {
  const address = isIP(host) ? host : (await lookup(host)).address;
  const create = (
    net as unknown as {
      _createServerHandle(
        address: string,
        port: number,
        family: number,
        fd?: number,
        flags?: number,
      ): unknown;
    }
  )._createServerHandle;
  const handle = create(address, port, isIP(address), undefined, 0);
  if (typeof handle === 'number')
    throw new Error(`could not bind ${host}:${port} for mutual TLS: ${getSystemErrorName(handle)}`);
  return handle as SharedListenHandle;
}

function pickFreePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, host, () => {
      const address = server.address();
      server.close(() =>
        typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port')),
      );
    });
  });
}
