/**
 * systemd notify and watchdog for the supervisor (the unit's main process, so NotifyAccess=main suffices).
 * What to send is libs/notify's; this file sends it and keeps time: EXTEND_TIMEOUT_USEC while a start, reload
 * or drain runs, and a heartbeat that pings every node's event loop, feeds the watchdog only when all of them
 * answered, and keeps STATUS= current. Nothing is created when NOTIFY_SOCKET is unset.
 *
 * Transport: a socket path gets datagrams from this process through node-unix-socket (prebuilt N-API, no
 * compiler at install). That package passes the whole 108-byte sun_path for an abstract name, which is a
 * different (NUL-padded) name than the one systemd binds, so an abstract socket is served by the
 * `systemd-notify` tool instead; its messages come from a child process, so that case needs NotifyAccess=all.
 */
import { spawn } from 'node:child_process';
import type { DgramSocket } from 'node-unix-socket';
import type { Logger } from 'pino';
import {
  formatNotify,
  monotonicUsec,
  type NotifyAddress,
  NotifyError,
  type NotifyFields,
  NotifySequence,
  parseNotifySocket,
  parseWatchdog,
  type RequestCount,
  requestRate,
  statusLine,
  type WatchdogSettings,
} from '../../libs/notify';

/** STATUS= refresh when there is no watchdog to pace the heartbeat. */
const STATUS_INTERVAL_MS = 5000;
/** EXTEND_TIMEOUT_USEC is repeated this often while a start, reload or drain runs... */
const EXTEND_EVERY_MS = 5000;
/** ...each time granting this much from now: three missed repeats (a wedged supervisor) let the timeout fire. */
const EXTEND_BY_USEC = 3 * EXTEND_EVERY_MS * 1000;
/** Messages waiting for systemd-notify beyond this are dropped (the tool is stuck or gone). */
const TOOL_QUEUE_LIMIT = 64;
const CLOSE_FLUSH_MS = 2000;

/** What one heartbeat saw of the nodes (the node set pings them; see NodeSet.heartbeat). */
export interface NodeHeartbeat {
  /** Nodes whose event loop did not answer the previous ping. */
  unresponsive: number[];
  /** Answered-request counters of the nodes that did answer. */
  counts: RequestCount[];
}

/** What the notifier asks of the host (the supervisor). */
export interface NotifyHost {
  heartbeat(): NodeHeartbeat;
  readonly epoch: number;
  readonly nodes: number;
  readonly nodesReady: number;
}

interface Transport {
  send(text: string): void;
  /** Resolves when what was sent has left (bounded by CLOSE_FLUSH_MS). */
  close(): Promise<void>;
}

/** Datagrams to a socket path from this very process: the sender is the main pid. */
class SocketTransport implements Transport {
  private readonly socket: DgramSocket;
  private pending = 0;
  private failing = false;
  private drained: (() => void) | undefined;

  constructor(
    private readonly path: string,
    private readonly logger: Logger,
  ) {
    // Loaded only when NOTIFY_SOCKET names a path: the CLI's other commands never need the native addon.
    const { DgramSocket: Socket } = require('node-unix-socket') as typeof import('node-unix-socket');
    this.socket = new Socket();
    this.socket.on('error', (error: Error) => logger.warn({ err: error.message }, 'notify socket error'));
  }

  send(text: string): void {
    const buffer = Buffer.from(text);
    this.pending++;
    try {
      this.socket.sendTo(buffer, 0, buffer.length, this.path, (error) => this.sent(error));
    } catch (error) {
      this.sent(error as Error);
    }
  }

  private sent(error: Error | undefined): void {
    this.pending--;
    // One warning per run of failures: a missing socket fails every heartbeat.
    if (error && !this.failing)
      this.logger.warn({ err: error.message, socket: this.path }, 'systemd notification not delivered');
    this.failing = error !== undefined;
    if (this.pending === 0) this.drained?.();
  }

  async close(): Promise<void> {
    if (this.pending > 0)
      await new Promise<void>((resolve) => {
        this.drained = resolve;
        setTimeout(resolve, CLOSE_FLUSH_MS).unref();
      });
    // The socket holds the event loop open until closed.
    this.socket.close();
  }
}

/** One `systemd-notify` run per message, strictly in order (concurrent runs could reorder READY and RELOADING). */
class ToolTransport implements Transport {
  private readonly queue: string[] = [];
  private running = false;
  private unavailable = false;
  private drained: (() => void) | undefined;

  constructor(
    private readonly address: string,
    private readonly logger: Logger,
  ) {}

  send(text: string): void {
    if (this.unavailable) return;
    if (this.queue.length >= TOOL_QUEUE_LIMIT) {
      this.logger.warn(
        { dropped: this.queue.shift() },
        'systemd-notify is not keeping up; oldest message dropped',
      );
    }
    this.queue.push(text);
    this.next();
  }

  private next(): void {
    if (this.running) return;
    const text = this.queue.shift();
    if (text === undefined) {
      this.drained?.();
      return;
    }
    this.running = true;
    const child = spawn('systemd-notify', text.split('\n'), {
      env: { ...process.env, NOTIFY_SOCKET: this.address },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const done = (problem: string | undefined): void => {
      if (!this.running) return;
      this.running = false;
      if (problem)
        this.logger.warn({ err: problem, socket: this.address }, 'systemd notification not delivered');
      this.next();
    };
    child.on('error', (error: NodeJS.ErrnoException) => {
      if (error.code === 'ENOENT') {
        this.unavailable = true;
        this.queue.length = 0;
        this.logger.error(
          { socket: this.address },
          'NOTIFY_SOCKET is an abstract socket and systemd-notify is not installed: no notifications will be sent',
        );
      }
      done(error.message);
    });
    child.on('exit', (code) =>
      done(code === 0 ? undefined : `systemd-notify exited ${code}: ${stderr.trim()}`),
    );
  }

  async close(): Promise<void> {
    if (!this.running && this.queue.length === 0) return;
    await new Promise<void>((resolve) => {
      this.drained = resolve;
      setTimeout(resolve, CLOSE_FLUSH_MS).unref();
    });
  }
}

function transportFor(address: NotifyAddress, logger: Logger): Transport {
  return address.kind === 'path'
    ? new SocketTransport(address.path, logger)
    : new ToolTransport(`@${address.name}`, logger);
}

export class SystemdNotifier {
  private readonly sequence = new NotifySequence();
  private host: NotifyHost | undefined;
  private heartbeatTimer: NodeJS.Timeout | undefined;
  private extendTimer: NodeJS.Timeout | undefined;
  private lastStatus = '';
  private lastCounts: { at: number; counts: RequestCount[] } | undefined;
  private requestsPerSecond: number | undefined;
  private unresponsive: number[] = [];
  private lastReloadError: string | undefined;

  private constructor(
    private readonly transport: Transport,
    private readonly watchdog: WatchdogSettings | undefined,
    private readonly logger: Logger,
  ) {}

  /**
   * The notifier the environment asks for, or undefined (NOTIFY_SOCKET unset, or malformed: logged). Removes
   * the variables from `env` so the node processes, which inherit it, never talk to systemd themselves.
   */
  static fromEnv(env: NodeJS.ProcessEnv, logger: Logger, pid = process.pid): SystemdNotifier | undefined {
    const socket = env.NOTIFY_SOCKET;
    const usec = env.WATCHDOG_USEC;
    const watchdogPid = env.WATCHDOG_PID;
    delete env.NOTIFY_SOCKET;
    delete env.WATCHDOG_USEC;
    delete env.WATCHDOG_PID;
    let address: NotifyAddress | undefined;
    try {
      address = parseNotifySocket(socket);
    } catch (error) {
      if (!(error instanceof NotifyError)) throw error;
      logger.error({ code: error.code, err: error.message }, 'systemd notify disabled');
      return undefined;
    }
    if (!address) return undefined;
    let watchdog: WatchdogSettings | undefined;
    try {
      watchdog = parseWatchdog(usec, watchdogPid, pid);
    } catch (error) {
      if (!(error instanceof NotifyError)) throw error;
      // READY=1 and the rest still matter: without them systemd would fail the start.
      logger.error({ code: error.code, err: error.message }, 'systemd watchdog disabled');
    }
    let transport: Transport;
    try {
      transport = transportFor(address, logger);
    } catch (error) {
      // The native addon did not load (a platform without a prebuilt binary): serve, but say why systemd hears nothing.
      logger.error(
        { code: 'notify_transport_unavailable', err: (error as Error).message },
        'systemd notify disabled',
      );
      return undefined;
    }
    logger.info(
      {
        socket,
        via: address.kind === 'path' ? 'node-unix-socket' : 'systemd-notify',
        watchdog_interval_ms: watchdog?.intervalMs ?? null,
      },
      'systemd notify enabled',
    );
    return new SystemdNotifier(transport, watchdog, logger);
  }

  /** Starts the heartbeat and the start-timeout extensions (the host is loading its models). */
  begin(host: NotifyHost): void {
    this.host = host;
    this.send([['EXTEND_TIMEOUT_USEC', EXTEND_BY_USEC]], true);
    this.extendTimer = setInterval(() => {
      if (this.sequence.timed) this.send([['EXTEND_TIMEOUT_USEC', EXTEND_BY_USEC]]);
    }, EXTEND_EVERY_MS);
    this.extendTimer.unref();
    this.heartbeatTimer = setInterval(() => this.beat(), this.watchdog?.intervalMs ?? STATUS_INTERVAL_MS);
    this.heartbeatTimer.unref();
  }

  /** Every node is ready: READY=1. */
  started(): void {
    const fields = this.sequence.started();
    if (fields) this.send(fields, true);
  }

  /** A reload began (any trigger: API, SIGHUP, CLI): RELOADING=1 with the monotonic clock. */
  reloading(): void {
    const fields = this.sequence.reloading(monotonicUsec(process.hrtime.bigint()));
    if (fields) this.send([...fields, ['EXTEND_TIMEOUT_USEC', EXTEND_BY_USEC]], true);
  }

  /** The barrier completed or aborted: READY=1 again, with why a failed reload failed in STATUS=. */
  reloaded(error: string | undefined): void {
    this.lastReloadError = error;
    const fields = this.sequence.reloaded();
    if (fields) this.send(fields, true);
  }

  /** SIGTERM: STOPPING=1, and the stop timeout is extended while the nodes drain. */
  stopping(): void {
    const fields = this.sequence.stopping();
    if (fields) this.send([...fields, ['EXTEND_TIMEOUT_USEC', EXTEND_BY_USEC]], true);
  }

  async close(): Promise<void> {
    clearInterval(this.heartbeatTimer);
    clearInterval(this.extendTimer);
    await this.transport.close();
  }

  /**
   * One heartbeat: WATCHDOG=1 only if every node's event loop answered the previous ping (a wedged node must
   * let the watchdog fire even though this process is fine), then the next ping goes out.
   */
  private beat(): void {
    if (!this.host) return;
    const seen = this.host.heartbeat();
    const now = Date.now();
    if (this.lastCounts)
      this.requestsPerSecond = requestRate(
        this.lastCounts.counts,
        seen.counts,
        (now - this.lastCounts.at) / 1000,
      );
    this.lastCounts = { at: now, counts: seen.counts };
    if (seen.unresponsive.join() !== this.unresponsive.join() && seen.unresponsive.length > 0)
      this.logger.warn(
        { nodes: seen.unresponsive },
        'node event loop unresponsive: withholding the watchdog ping',
      );
    this.unresponsive = seen.unresponsive;
    const fields: NotifyFields = [];
    if (this.watchdog && seen.unresponsive.length === 0) fields.push(['WATCHDOG', 1]);
    this.send(fields);
  }

  /** Sends `fields` plus STATUS= when it changed (or always, with `withStatus`); nothing when both are empty. */
  private send(fields: NotifyFields, withStatus = false): void {
    const host = this.host;
    if (host) {
      const status = statusLine({
        phase: this.sequence.phase,
        nodesReady: host.nodesReady,
        nodes: host.nodes,
        epoch: host.epoch,
        requestsPerSecond: this.requestsPerSecond,
        unresponsive: this.unresponsive,
        ...(this.lastReloadError ? { lastReloadError: this.lastReloadError } : {}),
      });
      if (withStatus || status !== this.lastStatus) fields = [...fields, ['STATUS', status]];
      this.lastStatus = status;
    }
    if (fields.length > 0) this.transport.send(formatNotify(fields));
  }
}
