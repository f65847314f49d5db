/**
 * What the `stream` scenario reads from the broker: the predictions a run produced, with the broker's own
 * stored timestamps (freshness measured from the broker's side, not the pipeline's), the cleanup of a
 * run's streams, and a run's pipeline config.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { DeliverPolicy } from '@nats-io/jetstream';
import { connectNats, type NatsHandle } from '../../apps/pipeline';
import type { FirstPrediction } from './analysis';

export { connectNats, type NatsHandle };

/** Names one run uses: its own subject root, streams and durable, deleted at the end. */
export interface RunNames {
  tag: string;
  events: string;
  predictions: string;
  side: string;
  durable: string;
}

export function runNames(prefix: string): RunNames {
  const tag = `bench${prefix}${process.pid}t${(Date.now() % 10_000_000).toString(36)}`;
  return {
    tag,
    events: `${tag}_EVENTS`,
    predictions: `${tag}_PREDICTIONS`,
    side: `${tag}_SIDE`,
    durable: `${tag}_pipeline`,
  };
}

export async function deleteRunStreams(nats: NatsHandle, names: RunNames): Promise<void> {
  for (const s of [names.events, names.predictions, names.side])
    await nats.jsm.streams.delete(s).catch(() => undefined);
}

/** The stream's last sequence (0 when empty or missing). */
export async function lastSeq(nats: NatsHandle, stream: string): Promise<number> {
  try {
    return (await nats.jsm.streams.info(stream)).state.last_seq;
  } catch {
    return 0;
  }
}

export interface ReadBack {
  first: FirstPrediction[];
  /** messages read, revisions among them, and distinct event ids of first predictions */
  total: number;
  revisions: number;
  distinctFirst: number;
  /** distinct event ids read back from the input stream, and how many have no first prediction */
  events?: number;
  unpredicted?: number;
}

interface PredictionBody {
  event_id?: string;
  event_time?: string;
  revision?: number;
}

const text = new TextDecoder();

/** What the reader hands over per message: its stream sequence, stored time (epoch ms) and payload. */
type OnMessage = (storedMs: number, data: Uint8Array) => void;

/**
 * Every message on `filter` in `stream` stored after sequence `afterSeq` (up to the stream's last sequence
 * when called), in order, through an ordered consumer. Call it once the run has drained.
 */
async function readAfter(
  nats: NatsHandle,
  stream: string,
  filter: string,
  afterSeq: number,
  onMessage: OnMessage,
  idleMs = 5000,
): Promise<void> {
  const until = await lastSeq(nats, stream);
  if (until <= afterSeq) return;
  // nats-server 2.9: one filter subject, as a string
  const consumer = await nats.js.consumers.get(stream, {
    filter_subjects: filter,
    deliver_policy: DeliverPolicy.StartSequence,
    opt_start_seq: afterSeq + 1,
  });
  const messages = await consumer.consume({ max_messages: 4096 });
  let idle: NodeJS.Timeout | undefined;
  const arm = (): void => {
    clearTimeout(idle);
    // nothing more matches the filter: stop waiting
    idle = setTimeout(() => void messages.close(), idleMs);
  };
  arm();
  try {
    for await (const m of messages) {
      arm();
      onMessage(Number(m.info.timestampNanos) / 1e6, m.data);
      if (m.seq >= until || m.info.pending === 0) break;
    }
  } finally {
    clearTimeout(idle);
    await messages.close().catch(() => undefined);
  }
}

/**
 * The predictions a run produced (stored after `afterSeq`), each first prediction joined with the stored
 * time of its input event (read from the events stream after `eventsAfterSeq`), so freshness splits into
 * publisher delay (event stored − event time) and pipeline time (prediction stored − event stored).
 */
export async function readPredictions(
  nats: NatsHandle,
  names: RunNames,
  afterSeq: number,
  eventsAfterSeq?: number,
  /** the null pipeline's output: each message is an event republished unchanged, its first and only "prediction" */
  republished = false,
): Promise<ReadBack> {
  const out: ReadBack = { first: [], total: 0, revisions: 0, distinctFirst: 0 };
  const ids = new Set<string>();
  const firstIds: string[] = [];
  await readAfter(
    nats,
    names.predictions,
    `${names.tag}.delivery.predictions.>`,
    afterSeq,
    (storedMs, data) => {
      out.total++;
      const body = JSON.parse(text.decode(data)) as PredictionBody;
      const first = republished ? body.revision === undefined : body.revision === 0;
      if (first && typeof body.event_time === 'string') {
        out.first.push({ storedMs, eventMs: Date.parse(body.event_time) });
        firstIds.push(body.event_id ?? '');
        if (body.event_id) ids.add(body.event_id);
      } else {
        out.revisions++;
      }
    },
  );
  out.distinctFirst = ids.size;
  if (eventsAfterSeq !== undefined) {
    const inStored = new Map<string, number>();
    await readAfter(
      nats,
      names.events,
      `${names.tag}.delivery.events.>`,
      eventsAfterSeq,
      (storedMs, data) => {
        const id = (JSON.parse(text.decode(data)) as { event_id?: unknown }).event_id;
        if (typeof id === 'string' && !inStored.has(id)) inStored.set(id, storedMs);
      },
    );
    out.first.forEach((p, i) => {
      const t = inStored.get(firstIds[i]!);
      if (t !== undefined) p.inStoredMs = t;
    });
    out.events = inStored.size;
    let unpredicted = 0;
    for (const id of inStored.keys()) if (!ids.has(id)) unpredicted++;
    out.unpredicted = unpredicted;
  }
  return out;
}

/** The broker the stream scenarios use: STREAMINFER_TEST_NATS or the machine's. */
export const natsUrl = (): string => process.env['STREAMINFER_TEST_NATS'] ?? 'nats://127.0.0.1:4222';

/**
 * The shipped deploy/pipeline.json with a run's own names and an ephemeral admin port, then `over` (top-level
 * settings) and `nested` (merged into `streams` and `consumer`), written to a temporary file.
 */
export function writeRunConfig(
  repoRoot: string,
  names: RunNames,
  over: Record<string, unknown> = {},
  nested: { streams?: Record<string, unknown>; consumer?: Record<string, unknown> } = {},
): string {
  const shipped = JSON.parse(
    fs.readFileSync(path.join(repoRoot, 'deploy', 'pipeline.json'), 'utf8'),
  ) as Record<string, Record<string, unknown>>;
  const config = {
    ...shipped,
    nats: natsUrl(),
    subjectRoot: names.tag,
    streams: {
      ...shipped['streams'],
      events: names.events,
      predictions: names.predictions,
      side: names.side,
      ...nested.streams,
    },
    consumer: { ...shipped['consumer'], durable: names.durable, ...nested.consumer },
    admin: { host: '127.0.0.1', port: 0 },
    logLevel: 'warn',
    ...over,
  };
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-stream-'));
  const file = path.join(dir, 'pipeline.json');
  fs.writeFileSync(file, JSON.stringify(config, null, 2));
  return file;
}
