/**
 * The side-output spool: a dead letter or late record the broker will not store (the side stream deleted,
 * a permission or storage refusal, a broker that does not answer) is written here, fsynced, and its source
 * message goes on to its ack, so it never holds its partition's position. A replay loop publishes what is
 * pending to its subject under its own Msg-Id until the broker takes it: the broker's dedupe and the
 * checkpoint read-back keep it to one copy, and a `done` line retires it.
 *
 * One file per process (`<dir>/<pid>-<tag>.spool`). A file whose writer is dead (kill -9, a crash, the host
 * restarted) is taken over whole by the next process that opens the directory — renamed first, so two never
 * take the same one — and its pending records continue in the new file. Bounded by maxBytes of pending data:
 * a spool that is full refuses, and the side output holds its partition as without a spool (the
 * dead_letters_failing gauge), saying so (`full`).
 */
import { randomBytes } from 'node:crypto';
import { type FileHandle, mkdir, open, readdir, readFile, rename, rmdir, unlink } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import { PipelineIoError } from '../errors';
import {
  doneLine,
  putLine,
  readSpool,
  recordBytes,
  type SpoolKind,
  type SpoolRecord,
  spoolFileName,
  spoolFilePid,
} from './spool-log';

export interface SpoolStats {
  records: number;
  bytes: number;
  maxBytes: number;
  /** A put was refused for room, and the pending bytes have not come down below 90 % since. */
  full: boolean;
  /** Store time of the oldest pending record (ms since epoch); null: none. */
  oldestAt: number | null;
  /** Why the last replay attempt failed (null: none failed since the last success). */
  lastError: string | null;
}

export interface SpoolOptions {
  /** The pipeline's spool directory (created if missing). */
  dir: string;
  maxBytes: number;
  logger: Logger;
  clock?: () => number;
  /** Publishes a record to its subject under its Msg-Id; resolves on the PubAck. */
  publish: (record: SpoolRecord) => Promise<void>;
  /** A record the replay published (not one the sink published itself: see landed()). */
  onReplayed?: (record: SpoolRecord) => void;
  /** Replay backoff after a failed attempt: from retryBaseMs, doubling to retryMaxMs. */
  retryBaseMs?: number;
  retryMaxMs?: number;
  /** How often the directory is looked at for files whose writer died. */
  adoptEveryMs?: number;
}

/** Spool files this process has open (two pipelines in one process must not take each other's). */
const openHere = new Set<string>();

/** Compaction: rewritten once the file holds this much more than what is pending. */
const COMPACT_SLACK_BYTES = 16 * 1024 * 1024;
/** Records published per replay round at once. */
const REPLAY_CHUNK = 64;

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export class SideOutputSpool {
  private readonly pending = new Map<string, SpoolRecord>();
  /** Puts not on disk yet, by Msg-Id: a second put of one waits for the same write. */
  private readonly writing = new Map<string, Promise<boolean>>();
  private bytes = 0;
  private fileBytes = 0;
  private full = false;
  private lastError: string | null = null;
  /** Lines waiting for the next write + fdatasync (group commit), each with whoever waits on it. */
  private queue: Array<{ line: string; done: (ok: boolean) => void }> = [];
  private flushing: Promise<void> | undefined;
  private closed = false;
  private timer: NodeJS.Timeout | undefined;
  private adoptTimer: NodeJS.Timeout | undefined;
  private retryMs: number;
  private replaying = false;
  private readonly clock: () => number;

  private constructor(
    private readonly options: SpoolOptions,
    private readonly file: string,
    private fh: FileHandle,
  ) {
    this.clock = options.clock ?? Date.now;
    this.retryMs = options.retryBaseMs ?? 500;
  }

  /** Creates this process's file and takes over the files of dead writers. Unusable dir: invalid_options. */
  static async open(options: SpoolOptions): Promise<SideOutputSpool> {
    const { dir } = options;
    const file = path.join(dir, spoolFileName(process.pid, randomBytes(4).toString('hex')));
    let fh: FileHandle | undefined;
    try {
      // Again when the directory vanished in between: another process's close() removes it once empty.
      for (let attempt = 1; !fh; attempt++) {
        await mkdir(dir, { recursive: true, mode: 0o700 });
        fh = await open(file, 'a', 0o600).catch((err: NodeJS.ErrnoException) => {
          if (err.code === 'ENOENT' && attempt < 3) return undefined;
          throw err;
        });
      }
    } catch (err) {
      throw new PipelineIoError(
        'invalid_options',
        `spool.dir ${dir}: cannot write the side-output spool there (${(err as Error).message})`,
        { cause: err },
      );
    }
    openHere.add(file);
    const spool = new SideOutputSpool(options, file, fh);
    await spool.adoptOrphans();
    return spool;
  }

  stats(): SpoolStats {
    const first = this.pending.values().next().value;
    return {
      records: this.pending.size,
      bytes: this.bytes,
      maxBytes: this.options.maxBytes,
      full: this.full,
      oldestAt: first?.at ?? null,
      lastError: this.lastError,
    };
  }

  /**
   * Stores a side output durably; true once it is on disk (fdatasync), or already pending. False when it
   * would not fit (the spool is full), the spool is closed, or the write failed: the caller holds it.
   */
  async put(msgId: string, subject: string, data: string | Uint8Array, kind: SpoolKind): Promise<boolean> {
    if (this.closed) return false;
    const inFlight = this.writing.get(msgId);
    if (inFlight) return inFlight;
    if (this.pending.has(msgId)) return true;
    const record: SpoolRecord = { msgId, subject, data, kind, at: this.clock() };
    const size = recordBytes(record);
    if (this.bytes + size > this.options.maxBytes) {
      if (!this.full)
        this.options.logger.error(
          { records: this.pending.size, bytes: this.bytes, maxBytes: this.options.maxBytes },
          'side-output spool full: dead letters and late records hold their partitions until it drains',
        );
      this.full = true;
      return false;
    }
    this.pending.set(msgId, record);
    this.bytes += size;
    const write = this.append(putLine(record));
    this.writing.set(msgId, write);
    const ok = await write;
    this.writing.delete(msgId);
    if (!ok && this.pending.get(msgId) === record) this.forget(record);
    // A replay waiting out its backoff is not hurried by new records (each would retry the whole spool).
    if (ok && this.timer === undefined) this.schedule(0);
    return ok;
  }

  /** The sink published this Msg-Id itself: no longer pending (retired, so a replay does not send it again). */
  landed(msgId: string): void {
    const record = this.pending.get(msgId);
    if (!record) return;
    this.forget(record);
    void this.append(doneLine(msgId));
  }

  /** Starts the replay loop (and the look for dead writers' files). */
  start(): void {
    this.schedule(0);
    const every = this.options.adoptEveryMs ?? 60_000;
    this.adoptTimer = setInterval(() => void this.adoptOrphans().catch(() => undefined), every);
    this.adoptTimer.unref();
  }

  /** Stops replaying; what is pending stays in the file for the next process (an empty file is removed). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.timer);
    clearInterval(this.adoptTimer);
    while (this.flushing) await this.flushing;
    await this.fh.close().catch(() => undefined);
    if (this.pending.size === 0) {
      await unlink(this.file).catch(() => undefined);
      // The pipeline's directory goes too once nothing is left in it (another process's file keeps it).
      await rmdir(this.options.dir).catch(() => undefined);
    }
    openHere.delete(this.file);
  }

  private forget(record: SpoolRecord): void {
    this.pending.delete(record.msgId);
    this.bytes -= recordBytes(record);
    if (this.full && this.bytes <= this.options.maxBytes * 0.9) this.full = false;
  }

  private append(line: string): Promise<boolean> {
    if (this.closed) return Promise.resolve(false);
    return new Promise((done) => {
      this.queue.push({ line, done });
      this.kick();
    });
  }

  /** One flush at a time; a line queued as the last one ended starts the next. */
  private kick(): void {
    if (this.flushing || this.queue.length === 0) return;
    this.flushing = this.flush().finally(() => {
      this.flushing = undefined;
      this.kick();
    });
  }

  /** Writes what is queued in one write and one fdatasync; every waiter learns whether it is durable. */
  private async flush(): Promise<void> {
    while (this.queue.length > 0) {
      const batch = this.queue;
      this.queue = [];
      const text = batch.map((b) => b.line).join('');
      let ok = true;
      try {
        await this.fh.write(text);
        await this.fh.datasync();
        this.fileBytes += Buffer.byteLength(text);
      } catch (err) {
        ok = false;
        this.options.logger.error({ file: this.file, err: String(err) }, 'side-output spool write failed');
      }
      for (const b of batch) b.done(ok);
      if (ok) await this.compactIfDue();
    }
  }

  /** Nothing pending: the file starts over. Mostly retired lines: rewritten with what is pending. */
  private async compactIfDue(): Promise<void> {
    if (this.queue.length > 0) return;
    try {
      if (this.pending.size === 0) {
        if (this.fileBytes === 0) return;
        await this.fh.truncate(0);
        this.fileBytes = 0;
        return;
      }
      if (this.fileBytes < 2 * this.bytes + COMPACT_SLACK_BYTES) return;
      const text = [...this.pending.values()].map(putLine).join('');
      const tmp = `${this.file}.tmp`;
      const out = await open(tmp, 'w', 0o600);
      try {
        await out.write(text);
        await out.sync();
      } finally {
        await out.close();
      }
      await rename(tmp, this.file);
      await this.fh.close();
      this.fh = await open(this.file, 'a', 0o600);
      this.fileBytes = Buffer.byteLength(text);
    } catch (err) {
      this.options.logger.warn({ file: this.file, err: String(err) }, 'side-output spool compaction failed');
    }
  }

  /**
   * Takes over the files of writers that are gone: renamed to a file of this process (atomic: one taker only;
   * if this process dies before it is done, that name is a dead writer's file again), their pending records
   * written into this process's file and fsynced, then removed.
   */
  private async adoptOrphans(): Promise<void> {
    const { dir, logger } = this.options;
    for (const name of await readdir(dir)) {
      const pid = spoolFilePid(name);
      const file = path.join(dir, name);
      if (pid === null || file === this.file || openHere.has(file)) continue;
      if (pid !== process.pid && alive(pid)) continue;
      const taken = path.join(dir, spoolFileName(process.pid, randomBytes(4).toString('hex')));
      try {
        await rename(file, taken);
      } catch {
        continue; // another process took it first
      }
      openHere.add(taken);
      try {
        let text: string;
        try {
          text = await readFile(taken, 'utf8');
        } catch {
          continue; // another pipeline of this process took it in between
        }
        const contents = readSpool(text);
        const fresh = [...contents.pending.values()].filter((r) => !this.pending.has(r.msgId));
        for (const r of fresh) {
          this.pending.set(r.msgId, r);
          this.bytes += recordBytes(r);
        }
        if (fresh.length > 0 && !(await this.append(fresh.map(putLine).join('')))) {
          // Not durable here: they stay in the taken file (a dead writer's once this process is gone).
          for (const r of fresh) if (this.pending.get(r.msgId) === r) this.forget(r);
          continue;
        }
        await unlink(taken);
        logger.warn(
          {
            from: name,
            records: fresh.length,
            tornTail: contents.tornTail,
            unreadable: contents.unreadable,
          },
          'took over the side-output spool of a process that is gone; replaying it',
        );
        if (fresh.length > 0) this.schedule(0);
      } finally {
        openHere.delete(taken);
      }
    }
  }

  private schedule(delayMs: number): void {
    if (this.closed || this.replaying) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.replay();
    }, delayMs);
    this.timer.unref();
  }

  /** Publishes what is pending, oldest first, in chunks; stops at the first failure and backs off. */
  private async replay(): Promise<void> {
    if (this.closed || this.pending.size === 0) return;
    this.replaying = true;
    const base = this.options.retryBaseMs ?? 500;
    let failed = false;
    try {
      const records = [...this.pending.values()];
      for (let i = 0; i < records.length && !failed && !this.closed; i += REPLAY_CHUNK) {
        const chunk = records.slice(i, i + REPLAY_CHUNK).filter((r) => this.pending.get(r.msgId) === r);
        const settled = await Promise.allSettled(chunk.map((r) => this.options.publish(r)));
        const done: string[] = [];
        settled.forEach((s, j) => {
          const r = chunk[j]!;
          if (s.status === 'rejected') {
            failed = true;
            this.lastError = String(s.reason);
            return;
          }
          if (this.pending.get(r.msgId) !== r) return;
          this.forget(r);
          done.push(doneLine(r.msgId));
          this.options.onReplayed?.(r);
        });
        if (done.length > 0) await this.append(done.join(''));
      }
    } finally {
      this.replaying = false;
    }
    if (failed) {
      // Said once per outage at warn (the gauges and /health carry it meanwhile), then at debug.
      const log = this.retryMs === base ? this.options.logger.warn : this.options.logger.debug;
      log.call(
        this.options.logger,
        { records: this.pending.size, err: this.lastError, retryInMs: this.retryMs },
        'side-output spool: the broker still refuses it; replay retried with backoff',
      );
      const wait = this.retryMs;
      this.retryMs = Math.min(this.options.retryMaxMs ?? 15_000, this.retryMs * 2);
      this.schedule(wait);
      return;
    }
    this.lastError = null;
    this.retryMs = base;
    if (this.pending.size > 0) this.schedule(0);
  }
}
