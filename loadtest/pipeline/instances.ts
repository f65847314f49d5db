/**
 * `streaminfer pipeline` instances for the partitioned stream scenarios: start one (its supervisor and what its
 * stdout says — every (re)start's pid and admin port, restores, catch-ups, completed checkpoints), read its
 * /health and /metrics, read the broker's view of every partition's durable, and clean a run up (its
 * streams, checkpoint and lease buckets).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import type { NatsHandle, RunNames } from './broker';
import { deleteRunStreams } from './broker';
import { parseProm } from './chaos-analysis';
import { type PipelineHandle, startPipeline } from './procs';

export interface Ready {
  atMs: number;
  pid: number;
  admin: number;
}

export interface StreamInstance {
  label: string;
  id: string;
  handle: PipelineHandle;
  readies: Ready[];
  restores: { atMs: number; partition: number; checkpoint: number; position: number; replayUntil: number }[];
  caughtUps: { atMs: number; partition: number; seconds: number }[];
  checkpoints: { atMs: number; id: number; position: number; bytes: number; ms: number }[];
  /** its warnings and errors, with their arrival time */
  events: { atMs: number; line: string }[];
  /** set once the whole instance (supervisor included) was killed */
  dead: boolean;
  current(): Ready;
}

const num = (v: unknown): number => Number(v);

/** Start `streaminfer pipeline --config <file>` as instance `id` and wait for its first "pipeline ready". */
export async function startInstance(
  repoRoot: string,
  label: string,
  id: string,
  configFile: string,
  timeoutMs = 90_000,
): Promise<StreamInstance> {
  const inst: Omit<StreamInstance, 'handle'> = {
    label,
    id,
    readies: [],
    restores: [],
    caughtUps: [],
    checkpoints: [],
    events: [],
    dead: false,
    current: () => inst.readies[inst.readies.length - 1]!,
  };
  const wanted = [
    '"pipeline ready"',
    '"restored from checkpoint"',
    '"caught up after restore"',
    '"checkpoint completed"',
  ];
  // Every line of the instance (its supervisor and pipeline processes), when asked: the report keeps only
  // what it measures, and a failed run is diagnosed from the whole log.
  const logDir = process.env.BENCH_STREAM_LOG_DIR;
  if (logDir) fs.mkdirSync(logDir, { recursive: true });
  const log = logDir ? fs.createWriteStream(path.join(logDir, `${label}.log`), { flags: 'a' }) : undefined;
  const onLine = (l: string): void => {
    log?.write(`${l}\n`);
    if (!l.startsWith('{')) return;
    const atMs = Date.now();
    if (/"level":(4|5|6)\d/.test(l)) inst.events.push({ atMs, line: l.slice(0, 400) });
    if (!wanted.some((w) => l.includes(w))) return;
    try {
      const j = JSON.parse(l) as Record<string, unknown>;
      const msg = j['msg'];
      if (msg === 'pipeline ready' && j['component'] === 'stream-supervisor')
        inst.readies.push({ atMs, pid: num(j['pid']), admin: num(j['admin']) });
      else if (msg === 'restored from checkpoint')
        inst.restores.push({
          atMs,
          partition: num(j['partition']),
          checkpoint: num(j['checkpoint']),
          position: num(j['position']),
          replayUntil: num(j['replayUntil']),
        });
      else if (msg === 'caught up after restore')
        inst.caughtUps.push({ atMs, partition: num(j['partition']), seconds: num(j['seconds']) });
      else if (msg === 'checkpoint completed')
        inst.checkpoints.push({
          atMs,
          id: num(j['checkpoint']),
          position: num(j['position']),
          bytes: num(j['bytes']),
          ms: num(j['ms']),
        });
    } catch {
      // a line that only looked like JSON
    }
  };
  const handle = await startPipeline(repoRoot, label, configFile, timeoutMs, onLine);
  fs.rmSync(path.dirname(configFile), { recursive: true, force: true });
  return { ...inst, handle };
}

/** SIGKILL of the instance's pipeline process (its supervisor restarts it); the pid killed. */
export function killProcess(inst: StreamInstance): number {
  const { pid } = inst.current();
  process.kill(pid, 'SIGKILL');
  return pid;
}

/** SIGKILL of the whole instance: its pipeline process and its supervisor (no drain, no lease given back). */
export function killWhole(inst: StreamInstance): number {
  const { pid } = inst.current();
  process.kill(pid, 'SIGKILL');
  try {
    process.kill(-inst.handle.pid, 'SIGKILL');
  } catch {
    process.kill(inst.handle.pid, 'SIGKILL');
  }
  inst.dead = true;
  return pid;
}

export interface PartitionHealth {
  partition: number;
  position: number;
  replaying: boolean;
  pending: number;
  ack_pending: number;
  checkpoint?: { last_id: number | null; position: number | null; age_s: number | null; held_acks: number };
}

export interface InstanceHealth {
  instance: { id: string; live: string[]; owned: number[] };
  partitions: PartitionHealth[];
  counts: Record<string, number>;
  freshness: { p50_ms: number; p95_ms: number; p99_ms: number };
}

/** GET /health; undefined while starting, not answering within the timeout, or down. */
export async function instanceHealth(port: number, timeoutMs = 1500): Promise<InstanceHealth | undefined> {
  try {
    const res = await fetch(`http://127.0.0.1:${port}/health`, { signal: AbortSignal.timeout(timeoutMs) });
    const body = (await res.json()) as Partial<InstanceHealth>;
    return body.instance && body.partitions ? (body as InstanceHealth) : undefined;
  } catch {
    return undefined;
  }
}

export async function scrape(port: number, timeoutMs = 3000): Promise<Map<string, number> | undefined> {
  try {
    const res = await fetch(`http://127.0.0.1:${port}/metrics`, { signal: AbortSignal.timeout(timeoutMs) });
    return parseProm(await res.text());
  } catch {
    return undefined;
  }
}

/** A partition's durable: `<durable>-p<k>`. */
export const partitionDurable = (names: RunNames, k: number): string => `${names.durable}-p${k}`;

/** Per partition, the broker's view of its durable (undefined while it is missing: being recreated). */
export async function partitionConsumers(
  nats: NatsHandle,
  names: RunNames,
  partitions: number,
): Promise<
  (
    | { pending: number; ackPending: number; delivered: number; deliveredCount: number; ackFloor: number }
    | undefined
  )[]
> {
  return Promise.all(
    Array.from({ length: partitions }, (_, k) =>
      nats.jsm.consumers
        .info(names.events, partitionDurable(names, k))
        .then((i) => ({
          pending: i.num_pending,
          ackPending: i.num_ack_pending,
          delivered: i.delivered.stream_seq,
          deliveredCount: i.delivered.consumer_seq,
          ackFloor: i.ack_floor.stream_seq,
        }))
        .catch(() => undefined),
    ),
  );
}

/** Every partition's durable exists and holds nothing undelivered or unacked (acks wait for checkpoints). */
export async function drained(nats: NatsHandle, names: RunNames, partitions: number): Promise<boolean> {
  const cs = await partitionConsumers(nats, names, partitions);
  return cs.every((c) => c !== undefined && c.pending === 0 && c.ackPending === 0);
}

/** Deletes a run's streams and its buckets' streams (`KV_<lease>`, `OBJ_<ckpt>`, `KV_<ckpt>_head`). */
export async function cleanupRun(
  nats: NatsHandle,
  names: RunNames,
  buckets: { lease?: string; checkpoint?: string },
): Promise<void> {
  await deleteRunStreams(nats, names);
  const streams = [
    ...(buckets.lease ? [`KV_${buckets.lease}`] : []),
    ...(buckets.checkpoint ? [`OBJ_${buckets.checkpoint}`, `KV_${buckets.checkpoint}_head`] : []),
  ];
  for (const s of streams) await nats.jsm.streams.delete(s).catch(() => undefined);
}
