/**
 * Checkpoints in JetStream: the snapshot is an object in an Object Store bucket (chunked, any size), and the
 * restore point is a pointer in a KV bucket, written only after the object is complete — so a failed or
 * partial checkpoint never becomes the restore point. The object the pointer named before is kept until the
 * next pointer is written (two generations), older ones are deleted.
 *
 * Object names carry a token of the store that wrote them (`<pipeline>.<partition>.<id>.<token>`): a stalled
 * previous owner numbering on from the same checkpoint never overwrites its successor's object (its pointer
 * write is fenced, its object write cannot be).
 *
 * Never ObjectStore.list(): on nats-server 2.9 every call leaves an ephemeral consumer on the bucket's stream
 * (the full chaos bench found 100 on one bucket, one per checkpoint). Old objects are found with one
 * stream-info subject listing (no consumer), deleted, and their metadata tombstones purged, so the listing
 * stays as small as the live objects.
 */
import { randomBytes } from 'node:crypto';
import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import { type KV, Kvm } from '@nats-io/kv';
import { type ObjectStore, Objm } from '@nats-io/obj';
import type { DeciderSnapshot } from '../../../libs/delivery';
import { createPlaced } from '../../../libs/jetstream';
import { describeReplicasRefusal, replicasShortfall } from '../../../libs/nats-auth';
import { testDelayMs, testHooksEnabled } from '../../../libs/test-hooks';
import { PipelineIoError } from '../errors';
import type { ModelPin } from '../inference/inference';

export const CHECKPOINT_VERSION = 1;

/**
 * Test hook (STREAMINFER_TEST_HOOKS=1 and STREAMINFER_TEST_CHECKPOINT_DELAY_MS): a pause between the object
 * and the pointer, announced on stderr, so a chaos test can kill the process in the middle of a checkpoint.
 */
async function testDelay(): Promise<void> {
  const ms = testHooksEnabled() ? testDelayMs('CHECKPOINT_DELAY_MS') : 0;
  if (!(ms > 0)) return;
  process.stderr.write('test hook: checkpoint object written, pointer pending\n');
  await new Promise((resolve) => setTimeout(resolve, ms));
}

export interface Checkpoint {
  version: typeof CHECKPOINT_VERSION;
  /** Increasing per pipeline and partition. */
  id: number;
  createdAt: string;
  /** Input stream sequence up to which (inclusive) every message is reflected in `state` and published. */
  position: number;
  /** Last sequences of the output streams when it was taken: a restore reads what was published after them. */
  outputs: { predictions: number; side: number };
  pin: ModelPin;
  epoch: number;
  state: DeciderSnapshot;
}

interface Pointer {
  id: number;
  object: string;
  position: number;
  createdAt: string;
}

const decoder = new TextDecoder();

/** How the object store names an object's metadata subject (base64url, padded). */
function metaSubject(bucket: string, name: string): string {
  const b64 = Buffer.from(name).toString('base64url');
  return `$O.${bucket}.M.${b64}${'='.repeat((4 - (b64.length % 4)) % 4)}`;
}

export class CheckpointStore {
  /** Names this store's objects: unique per store (per owner's life). */
  private readonly token = randomBytes(4).toString('hex');

  private constructor(
    private readonly objects: ObjectStore,
    private readonly pointers: KV,
    private readonly jsm: JetStreamManager,
    private readonly bucket: string,
    private readonly key: string,
  ) {}

  /** Opens (creating when missing) `<bucket>` (objects) and `<bucket>_head` (pointers) for one pipeline partition. */
  static async open(
    js: JetStreamClient,
    bucket: string,
    pipeline: string,
    partition: string,
    replicas = 1,
  ): Promise<CheckpointStore> {
    try {
      const objects = await createPlaced(() => new Objm(js).create(bucket, { replicas }));
      const pointers = await createPlaced(() =>
        new Kvm(js).create(`${bucket}_head`, { history: 1, replicas }),
      );
      const short =
        replicasShortfall(
          (await objects.status()).replicas,
          replicas,
          `checkpoint store ${bucket}`,
          `OBJ_${bucket}`,
        ) ??
        replicasShortfall(
          (await pointers.status()).replicas,
          replicas,
          `checkpoint bucket ${bucket}_head`,
          `KV_${bucket}_head`,
        );
      if (short) throw new PipelineIoError('stream_mismatch', short);
      return new CheckpointStore(
        objects,
        pointers,
        await js.jetstreamManager(),
        bucket,
        `${pipeline}.${partition}`,
      );
    } catch (err) {
      if (err instanceof PipelineIoError) throw err;
      const refused = describeReplicasRefusal(err, replicas, `checkpoint buckets ${bucket}`);
      if (refused) throw new PipelineIoError('invalid_options', refused, { cause: err });
      throw new PipelineIoError('stream_provision_failed', `checkpoint buckets ${bucket}: ${String(err)}`, {
        cause: err,
      });
    }
  }

  /** The latest completed checkpoint, or null when there is none; one that does not read throws checkpoint_invalid. */
  async latest(): Promise<Checkpoint | null> {
    const entry = await this.pointers.get(this.key);
    if (!entry || entry.operation !== 'PUT' || entry.value.length === 0) return null;
    const pointer = parsePointer(entry.value, `checkpoint pointer ${this.key} (bucket ${this.bucket}_head)`);
    return this.read(pointer.object);
  }

  /** One stored checkpoint object, validated (checkpoint_invalid when missing or malformed). */
  private async read(object: string): Promise<Checkpoint> {
    const blob = await this.objects.getBlob(object);
    if (!blob) throw new PipelineIoError('checkpoint_invalid', `checkpoint ${object} is named but missing`);
    return parseCheckpoint(blob, `checkpoint ${object}`);
  }

  /**
   * Operator recovery of a partition whose checkpoint does not read (nothing may work the partition
   * meanwhile): the pointer is kept aside under `<key>.quarantined`, then the restore point becomes
   * 'previous' — the newest stored checkpoint of the partition that reads, other than the one the bad
   * pointer names — or 'ack-floor': a new checkpoint with empty keyed state at `ackFloor` (what the
   * broker has acknowledged), whose output positions are the streams' ends now.
   */
  async recover(
    from: 'previous' | 'ack-floor',
    empty: () => Promise<Omit<Checkpoint, 'id' | 'createdAt'>>,
  ): Promise<{ quarantined: string | null; id: number; position: number; object: string }> {
    const entry = await this.pointers.get(this.key);
    let quarantined: string | null = null;
    let named: string | undefined;
    let namedId = 0;
    if (entry && entry.operation === 'PUT' && entry.value.length > 0) {
      quarantined = `${this.key}.quarantined`;
      await this.pointers.put(quarantined, entry.value);
      try {
        const bad = parsePointer(entry.value, 'pointer');
        named = bad.object;
        namedId = bad.id;
      } catch {
        // Unreadable: it names nothing this can trust.
      }
    }
    const stored = await this.storedObjects();
    if (from === 'previous') {
      const problems: string[] = [];
      for (const { name } of stored) {
        if (name === named) continue;
        try {
          const checkpoint = await this.read(name);
          await this.writePointer({
            id: checkpoint.id,
            object: name,
            position: checkpoint.position,
            createdAt: checkpoint.createdAt,
          });
          return { quarantined, id: checkpoint.id, position: checkpoint.position, object: name };
        } catch (err) {
          problems.push((err as Error).message);
        }
      }
      throw new PipelineIoError(
        'checkpoint_invalid',
        `no earlier checkpoint of ${this.key} reads${problems.length > 0 ? ` (${problems.join('; ')})` : ''}: recover from the ack floor instead`,
      );
    }
    const id = Math.max(namedId, ...stored.map((o) => o.id), 0) + 1;
    const object = `${this.key}.${id}.${this.token}`;
    const checkpoint: Checkpoint = { ...(await empty()), id, createdAt: new Date().toISOString() };
    await this.objects.putBlob({ name: object }, new TextEncoder().encode(JSON.stringify(checkpoint)));
    await this.writePointer({ id, object, position: checkpoint.position, createdAt: checkpoint.createdAt });
    return { quarantined, id, position: checkpoint.position, object };
  }

  private async writePointer(pointer: Pointer): Promise<void> {
    await this.pointers.put(this.key, JSON.stringify(pointer));
  }

  /** This partition's stored checkpoint objects, newest (highest id) first. */
  private async storedObjects(): Promise<Array<{ name: string; id: number }>> {
    const prefix = `$O.${this.bucket}.M.`;
    const info = await this.jsm.streams.info(`OBJ_${this.bucket}`, { subjects_filter: `${prefix}>` });
    const out: Array<{ name: string; id: number }> = [];
    for (const subject of Object.keys(info.state.subjects ?? {})) {
      const name = Buffer.from(subject.slice(prefix.length), 'base64url').toString();
      if (!name.startsWith(`${this.key}.`)) continue;
      const id = Number(name.slice(this.key.length + 1).split('.')[0]);
      if (Number.isInteger(id)) out.push({ name, id });
    }
    return out.sort((a, b) => b.id - a.id);
  }

  /** Writes a serialised checkpoint (the pipeline serialises it at its barrier), then moves the pointer. */
  async save(
    id: number,
    position: number,
    bytes: Uint8Array,
    fence: () => boolean = () => true,
  ): Promise<void> {
    const object = `${this.key}.${id}.${this.token}`;
    await this.objects.putBlob({ name: object }, bytes);
    await testDelay();
    // A process that stalled past its lease (another instance may own the partition now) never moves the
    // restore point: the object stays an orphan, deleted with the next generation.
    if (!fence())
      throw new PipelineIoError('lease_lost', `${this.key}: the partition's lease is no longer held`);
    const previous = await this.pointers.get(this.key);
    const pointer: Pointer = { id, object, position, createdAt: new Date().toISOString() };
    await this.pointers.put(this.key, JSON.stringify(pointer));
    // Two generations: the one just replaced stays (a reader may be on it); older ones (and objects of
    // checkpoints whose pointer was never written) go.
    if (previous?.operation === 'PUT' && previous.value.length > 0) {
      const before = JSON.parse(decoder.decode(previous.value)) as Pointer;
      await this.prune(before.id).catch(() => undefined);
    }
  }

  /** Deletes this partition's objects with ids below `keepFrom` (any writer's, failed checkpoints' included). */
  private async prune(keepFrom: number): Promise<void> {
    const prefix = `$O.${this.bucket}.M.`;
    const info = await this.jsm.streams.info(`OBJ_${this.bucket}`, { subjects_filter: `${prefix}>` });
    for (const subject of Object.keys(info.state.subjects ?? {})) {
      const name = Buffer.from(subject.slice(prefix.length), 'base64url').toString();
      if (!name.startsWith(`${this.key}.`)) continue;
      // `<id>.<token>` (or `<id>` from builds before the token)
      const id = Number(name.slice(this.key.length + 1).split('.')[0]);
      if (!Number.isInteger(id) || id >= keepFrom) continue;
      await this.objects.delete(name).catch(() => undefined);
      // The tombstone delete() leaves: without it every checkpoint ever taken would stay a subject.
      await this.jsm.streams
        .purge(`OBJ_${this.bucket}`, { filter: metaSubject(this.bucket, name) })
        .catch(() => undefined);
    }
  }
}

function invalid(what: string, problem: string): PipelineIoError {
  return new PipelineIoError('checkpoint_invalid', `${what}: ${problem}`);
}

function parseJson(bytes: Uint8Array, what: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(decoder.decode(bytes));
  } catch (err) {
    throw invalid(what, `not JSON (${(err as Error).message})`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw invalid(what, 'not a JSON object');
  return value as Record<string, unknown>;
}

const isCount = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 0;
const isText = (v: unknown): v is string => typeof v === 'string' && v !== '';

/** A pointer as save() writes it, or checkpoint_invalid naming what is wrong. */
export function parsePointer(bytes: Uint8Array, what: string): Pointer {
  const p = parseJson(bytes, what);
  if (!isCount(p.id) || p.id < 1) throw invalid(what, '"id" must be an integer >= 1');
  if (!isText(p.object)) throw invalid(what, '"object" must name a checkpoint object');
  if (!isCount(p.position)) throw invalid(what, '"position" must be an integer >= 0');
  if (!isText(p.createdAt)) throw invalid(what, '"createdAt" must be a time');
  return { id: p.id, object: p.object, position: p.position, createdAt: p.createdAt };
}

/**
 * A checkpoint object of this build's format, or checkpoint_invalid naming what is wrong. The keyed state
 * itself is checked when the decider restores it (EngineSnapshotError, turned into checkpoint_invalid there).
 */
export function parseCheckpoint(bytes: Uint8Array, what: string): Checkpoint {
  const c = parseJson(bytes, what);
  if (c.version !== CHECKPOINT_VERSION)
    throw invalid(
      what,
      `format version ${JSON.stringify(c.version)} (this build reads ${CHECKPOINT_VERSION})`,
    );
  if (!isCount(c.id) || c.id < 1) throw invalid(what, '"id" must be an integer >= 1');
  if (!isText(c.createdAt) || Number.isNaN(Date.parse(c.createdAt)))
    throw invalid(what, '"createdAt" must be an ISO time');
  if (!isCount(c.position)) throw invalid(what, '"position" must be an integer >= 0');
  const outputs = c.outputs as Record<string, unknown> | null | undefined;
  if (
    typeof outputs !== 'object' ||
    outputs === null ||
    !isCount(outputs.predictions) ||
    !isCount(outputs.side)
  )
    throw invalid(what, '"outputs" must hold the predictions and side stream sequences');
  const pin = c.pin as Record<string, unknown> | null | undefined;
  if (typeof pin !== 'object' || pin === null || !isText(pin.model) || !isText(pin.version))
    throw invalid(what, '"pin" must name a model and a version');
  if (!isCount(c.epoch)) throw invalid(what, '"epoch" must be an integer >= 0');
  if (typeof c.state !== 'object' || c.state === null || Array.isArray(c.state))
    throw invalid(what, '"state" must be a decider snapshot');
  return c as unknown as Checkpoint;
}
