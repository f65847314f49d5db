/**
 * The systemd notify protocol (sd_notify(3)) as data: where to send (NOTIFY_SOCKET), whether the watchdog is
 * ours (WATCHDOG_USEC, WATCHDOG_PID), what each message says. No I/O: the supervisor sends what this builds.
 */
import { NotifyError } from './errors';

/** sockaddr_un.sun_path holds 108 bytes; a path needs its NUL terminator, an abstract name its leading NUL. */
const SUN_PATH_BYTES = 108;

/**
 * Where notifications go. `path`: a socket file. `abstract`: a Linux abstract socket (`@name` in the
 * variable); `name` excludes the `@`, and the kernel address is a NUL followed by exactly these bytes.
 */
export type NotifyAddress = { kind: 'path'; path: string } | { kind: 'abstract'; name: string };

/** NOTIFY_SOCKET → an address; undefined when unset or empty (then nothing is ever sent). */
export function parseNotifySocket(value: string | undefined): NotifyAddress | undefined {
  if (value === undefined || value === '') return undefined;
  const bytes = Buffer.byteLength(value);
  if (value.startsWith('@')) {
    if (bytes < 2)
      throw new NotifyError('notify_socket_invalid', 'NOTIFY_SOCKET "@" names no abstract socket');
    // '@' stands for the leading NUL: the name may fill the rest of sun_path.
    if (bytes > SUN_PATH_BYTES)
      throw new NotifyError(
        'notify_socket_invalid',
        `NOTIFY_SOCKET abstract name is ${bytes - 1} bytes; at most ${SUN_PATH_BYTES - 1} fit`,
      );
    return { kind: 'abstract', name: value.slice(1) };
  }
  if (!value.startsWith('/'))
    throw new NotifyError(
      'notify_socket_invalid',
      `NOTIFY_SOCKET must be an absolute path or @abstract-name, got ${JSON.stringify(value)}`,
    );
  if (bytes >= SUN_PATH_BYTES)
    throw new NotifyError(
      'notify_socket_invalid',
      `NOTIFY_SOCKET path is ${bytes} bytes; at most ${SUN_PATH_BYTES - 1} fit`,
    );
  return { kind: 'path', path: value };
}

export interface WatchdogSettings {
  /** WatchdogSec as systemd gave it. */
  usec: number;
  /** How often to ping: half the timeout, as sd_watchdog_enabled(3) advises. */
  intervalMs: number;
}

/**
 * WATCHDOG_USEC / WATCHDOG_PID → the watchdog this process must feed, or undefined when there is none or it
 * belongs to another process (WATCHDOG_PID names someone else, as in sd_watchdog_enabled(3)).
 */
export function parseWatchdog(
  usec: string | undefined,
  pidText: string | undefined,
  ownPid: number,
): WatchdogSettings | undefined {
  if (usec === undefined || usec === '') return undefined;
  if (pidText !== undefined && pidText !== '') {
    const pid = Number(pidText);
    if (!/^[1-9][0-9]*$/.test(pidText))
      throw new NotifyError(
        'watchdog_invalid',
        `WATCHDOG_PID must be a process id, got ${JSON.stringify(pidText)}`,
      );
    if (pid !== ownPid) return undefined;
  }
  if (!/^[1-9][0-9]*$/.test(usec))
    throw new NotifyError(
      'watchdog_invalid',
      `WATCHDOG_USEC must be a positive integer, got ${JSON.stringify(usec)}`,
    );
  const value = Number(usec);
  return { usec: value, intervalMs: Math.max(1, Math.floor(value / 2000)) };
}

/** One datagram: `KEY=value` lines; a value never spans lines (STATUS comes from log-like text). */
export type NotifyFields = Array<[string, string | number | bigint]>;

export function formatNotify(fields: NotifyFields): string {
  return fields.map(([key, value]) => `${key}=${String(value).replace(/[\r\n]+/g, ' ')}`).join('\n');
}

export interface StatusFacts {
  phase: 'starting' | 'ready' | 'reloading' | 'stopping';
  nodesReady: number;
  nodes: number;
  epoch: number;
  /** Undefined until two heartbeats have been counted. */
  requestsPerSecond: number | undefined;
  /** Nodes whose event loop missed the last liveness ping. */
  unresponsive: number[];
  /** The last reload, when it failed: `systemctl status` shows why. */
  lastReloadError?: string;
}

/** The one-line STATUS= summary `systemctl status` shows. */
export function statusLine(facts: StatusFacts): string {
  const parts = [
    facts.phase,
    `nodes ready ${facts.nodesReady}/${facts.nodes}`,
    `epoch ${facts.epoch}`,
    facts.requestsPerSecond === undefined
      ? 'requests/s -'
      : `requests/s ${facts.requestsPerSecond.toFixed(1)}`,
  ];
  if (facts.unresponsive.length > 0)
    parts.push(`event loop unresponsive: node ${facts.unresponsive.join(', node ')}`);
  if (facts.lastReloadError) parts.push(`last reload failed: ${facts.lastReloadError}`);
  return parts.join('; ');
}

/** A node's answered-request counter as of one heartbeat; a new pid is a restarted node counting from zero. */
export interface RequestCount {
  node: number;
  pid: number;
  answered: number;
}

/** Requests answered per second between two heartbeats `seconds` apart (per-node deltas; restarts count anew). */
export function requestRate(
  before: readonly RequestCount[],
  after: readonly RequestCount[],
  seconds: number,
): number {
  if (!(seconds > 0)) return 0;
  let delta = 0;
  for (const now of after) {
    const then = before.find((count) => count.node === now.node && count.pid === now.pid);
    delta += then && then.answered <= now.answered ? now.answered - then.answered : now.answered;
  }
  return delta / seconds;
}

/** MONOTONIC_USEC= wants CLOCK_MONOTONIC in µs; Node's hrtime is that clock on Linux, in ns. */
export function monotonicUsec(hrtimeNs: bigint): bigint {
  return hrtimeNs / 1000n;
}
