/**
 * The fleet's registry record: KV `streaminfer_fleet_<F>`, key `registry`, written only by compare-and-set
 * (kv.create when absent, kv.update on the revision read), so two coordinators can never both commit from the
 * same record: exactly one write lands, the other gets `conflict` with the record that won.
 */
import type { KV, KvEntry } from '@nats-io/kv';
import { isWrongRevision } from '../../../libs/jetstream';
import type { FleetConnection } from './connection';
import { FleetError } from './errors';
import { openBucket } from './kv-bucket';
import type { RegistryEntry } from './record-shapes';
import { decodeJson, type FleetRecord, parseFleetRecord, REGISTRY_KEY } from './records';

/** History kept per key: a few previous records for an operator to look at. */
const HISTORY = 5;
/** Pause before re-creating a watch that ended or failed while the connection stayed up. */
const WATCH_RETRY_MS = 500;
/** How often a watch checks that it still receives (see watch()). */
const WATCH_CHECK_MS = 2000;

export interface RegistryWatch {
  stop(): void;
}

export class RegistryStore {
  private constructor(
    private readonly conn: FleetConnection,
    private readonly kv: KV,
  ) {}

  /** Opens the registry bucket, creating it (history 5) when missing. */
  static async open(conn: FleetConnection): Promise<RegistryStore> {
    return new RegistryStore(conn, await openBucket(conn, conn.names.registryBucket, { history: HISTORY }));
  }

  /** The record and its revision, or undefined when the fleet has none yet. A malformed one: invalid_record. */
  read(): Promise<RegistryEntry | undefined> {
    return this.conn.call('registry read', async () => entryOf(await this.kv.get(REGISTRY_KEY)));
  }

  /** Writes the first record; someone was first → `conflict` carrying theirs. Returns the revision. */
  create(record: FleetRecord): Promise<number> {
    const value = JSON.stringify(parseFleetRecord(record));
    return this.conn.call('registry create', async () => {
      try {
        return await this.kv.create(REGISTRY_KEY, value);
      } catch (err) {
        if (!isWrongRevision(err)) throw err;
        throw await this.conflict('a fleet record exists already', err);
      }
    });
  }

  /** The commit point: CAS on `expectedRevision`; moved → `conflict` carrying the current record. */
  commit(record: FleetRecord, expectedRevision: number): Promise<number> {
    const value = JSON.stringify(parseFleetRecord(record));
    return this.conn.call('registry commit', async () => {
      try {
        return await this.kv.update(REGISTRY_KEY, value, expectedRevision);
      } catch (err) {
        if (!isWrongRevision(err)) throw err;
        throw await this.conflict(`the fleet record is no longer at revision ${expectedRevision}`, err);
      }
    });
  }

  /**
   * Calls onRecord with the current record, then with every later one, in revision order, each once.
   * Survives NATS restarts: nats.js (3.4) resets the watch's consumer itself after a reconnect (seen after
   * 2 s and 15 s outages). It does NOT recover a consumer deleted under it (seen: nothing for 30 s, the
   * iterator never ends), so every `checkEveryMs` the key's revision is read directly: newer than the last
   * delivered on two checks in a row → the watch is made again from the last revision seen. A watch that ends,
   * or could not be made while NATS was down, is made again the same way. It is not stopped on a disconnect: a
   * consumer dropped while the server is away is never deleted (seen: one per restart, still there 15 s later).
   * A malformed record goes to onError and is skipped.
   */
  watch(
    onRecord: (record: FleetRecord, revision: number) => void,
    onError: (err: unknown) => void = () => undefined,
    checkEveryMs = WATCH_CHECK_MS,
  ): RegistryWatch {
    let lastRevision = 0;
    /** A revision the check saw that the watch had not delivered. */
    let behind = 0;
    let stopped = false;
    let running = false;
    let current: { stop(): void } | undefined;
    let retry: NodeJS.Timeout | undefined;

    const deliver = (entry: KvEntry) => {
      // A re-made watch may overlap the old one: each revision once, in order.
      if (entry.revision <= lastRevision) return;
      lastRevision = entry.revision;
      if (entry.operation !== 'PUT') return;
      try {
        onRecord(parseFleetRecord(decodeJson('registry record', entry.value)), entry.revision);
      } catch (err) {
        onError(err);
      }
    };

    const run = async () => {
      retry = undefined;
      if (stopped || running || !this.conn.available) return; // a reconnect calls run again
      running = true;
      try {
        const iter = await this.conn.call('registry watch', () =>
          this.kv.watch({
            key: REGISTRY_KEY,
            ...(lastRevision > 0 ? { resumeFromRevision: lastRevision + 1 } : {}),
          }),
        );
        current = iter;
        if (stopped) iter.stop();
        for await (const entry of iter) deliver(entry);
      } catch (err) {
        if (!stopped) onError(err);
      } finally {
        current = undefined;
        running = false;
      }
      if (!stopped && this.conn.available) {
        retry = setTimeout(() => void run(), WATCH_RETRY_MS);
        retry.unref();
      }
    };

    const check = async () => {
      if (stopped || !current || !this.conn.available) return;
      try {
        const entry = await this.conn.call('registry watch check', () => this.kv.get(REGISTRY_KEY));
        const revision = entry?.revision ?? 0;
        if (entry && revision < lastRevision) {
          // The bucket was deleted and made anew (or NATS restarted without its store): revisions start over.
          // Watch again from its start, or the new record is never delivered (it sits below lastRevision).
          lastRevision = 0;
          behind = 0;
          onError(
            new FleetError(
              'cluster_unavailable',
              `registry revision ${revision} is below the last one seen: the bucket was made anew; watching it again`,
            ),
          );
          current?.stop();
          return;
        }
        if (revision <= lastRevision) behind = 0;
        else if (behind === 0 || lastRevision >= behind) behind = revision;
        else {
          // Two checks apart and still not delivered: the watch is dead (its iterator ends, run() re-makes it).
          behind = 0;
          onError(
            new FleetError('cluster_unavailable', `registry watch stalled before revision ${revision}`),
          );
          current?.stop();
        }
      } catch {
        // The next check retries.
      }
    };
    const checker = setInterval(() => void check(), checkEveryMs);
    checker.unref();

    const unsubscribe = this.conn.onAvailability((available) => {
      if (available && !stopped) void run();
    });
    void run();
    return {
      stop: () => {
        stopped = true;
        unsubscribe();
        clearInterval(checker);
        if (retry) clearTimeout(retry);
        current?.stop();
      },
    };
  }

  private async conflict(message: string, cause: unknown): Promise<FleetError> {
    const current = entryOf(await this.kv.get(REGISTRY_KEY));
    return new FleetError('conflict', message, { cause, ...(current ? { current } : {}) });
  }
}

function entryOf(entry: KvEntry | null): RegistryEntry | undefined {
  if (entry?.operation !== 'PUT') return undefined;
  try {
    return { record: parseFleetRecord(decodeJson('registry record', entry.value)), revision: entry.revision };
  } catch (err) {
    if (!(err instanceof FleetError)) throw err;
    throw new FleetError(err.code, `${err.message} (revision ${entry.revision})`, {
      cause: err,
      revision: entry.revision,
    });
  }
}
