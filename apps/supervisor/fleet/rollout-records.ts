/**
 * The fleet's rollouts: one key per model, `rollout.<model>`, in the registry's KV bucket
 * (`streaminfer_fleet_<F>`), written only by compare-and-set (kv.create when absent, kv.update on the revision
 * read), so two hosts can never both advance one rollout from the same state: exactly one write lands, the
 * other gets `conflict` and reads again. What a value holds is the rollout controller's (rollout-store.ts).
 */
import type { KV } from '@nats-io/kv';
import { isWrongRevision, listKeys } from '../../../libs/jetstream';
import type { FleetConnection } from './connection';
import { FleetError } from './errors';
import { openBucket } from './kv-bucket';

const PREFIX = 'rollout.';
/** The registry bucket's history (registry-store.ts): a bucket exists with one setting only. */
const HISTORY = 5;
const decoder = new TextDecoder();

export class RolloutRecords {
  private constructor(
    private readonly conn: FleetConnection,
    private readonly kv: KV,
  ) {}

  static async open(conn: FleetConnection): Promise<RolloutRecords> {
    return new RolloutRecords(conn, await openBucket(conn, conn.names.registryBucket, { history: HISTORY }));
  }

  static key(model: string): string {
    return `${PREFIX}${model}`;
  }

  /** One model's value and revision; undefined when there is none (or it was deleted). */
  read(model: string): Promise<{ value: unknown; revision: number } | undefined> {
    return this.conn.call('rollout read', async () => {
      const entry = await this.kv.get(RolloutRecords.key(model));
      if (entry?.operation !== 'PUT' || entry.value.length === 0) return undefined;
      return { value: JSON.parse(decoder.decode(entry.value)) as unknown, revision: entry.revision };
    });
  }

  /** Every model's value (those that cannot be parsed come back as their text). */
  list(): Promise<Array<{ model: string; value: unknown; revision: number }>> {
    return this.conn.call('rollout list', async () => {
      const keys = (await listKeys(this.conn.jsm, this.conn.names.registryBucket)).filter((key) =>
        key.startsWith(PREFIX),
      );
      const out: Array<{ model: string; value: unknown; revision: number }> = [];
      for (const key of keys) {
        const entry = await this.kv.get(key);
        if (entry?.operation !== 'PUT' || entry.value.length === 0) continue;
        const text = decoder.decode(entry.value);
        let value: unknown = text;
        try {
          value = JSON.parse(text);
        } catch {
          // left as text: the caller says it cannot read it
        }
        out.push({ model: key.slice(PREFIX.length), value, revision: entry.revision });
      }
      return out;
    });
  }

  /** CAS write: `expected` 0 = the key must not exist. Moved → FleetError `conflict`. Returns the revision. */
  write(model: string, value: unknown, expected: number): Promise<number> {
    const key = RolloutRecords.key(model);
    const text = JSON.stringify(value);
    return this.conn.call('rollout write', async () => {
      try {
        return expected === 0 ? await this.kv.create(key, text) : await this.kv.update(key, text, expected);
      } catch (err) {
        if (!isWrongRevision(err)) throw err;
        throw new FleetError('conflict', `the rollout of "${model}" changed since revision ${expected}`);
      }
    });
  }

  /** Removes every rollout key (tests clean their fleets up with it). */
  async purge(): Promise<void> {
    for (const entry of await this.list()) await this.kv.purge(RolloutRecords.key(entry.model));
  }
}
