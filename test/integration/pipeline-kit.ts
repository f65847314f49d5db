/**
 * What the stream tests share: the broker address, unique stream names and subject roots per test (deleted
 * after), reading a stream back, waiting on a condition.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { type ConsumerMessages, DeliverPolicy } from '@nats-io/jetstream';
import { eventSubject, type NatsHandle } from '../../apps/pipeline';
import { TEST_NATS_URL } from './broker-kit';
import { runCli } from './harness';

export const NATS_URL = TEST_NATS_URL;

export interface StreamNames {
  tag: string;
  events: string;
  predictions: string;
  side: string;
}

let counter = 0;

/** Names no other test (or run) uses; remember to delete them (deleteStreams). */
export function uniqueNames(prefix: string): StreamNames {
  const tag = `${prefix}${process.pid}t${Date.now() % 1_000_000}n${counter++}`;
  return { tag, events: `${tag}_EVENTS`, predictions: `${tag}_PREDICTIONS`, side: `${tag}_SIDE` };
}

/** The streams, and the lease and checkpoint buckets the tests name after the tag. */
export async function deleteStreams(nats: NatsHandle, names: StreamNames[]): Promise<void> {
  for (const n of names)
    for (const s of [
      n.events,
      n.predictions,
      n.side,
      `KV_${n.tag}_leases`,
      `OBJ_${n.tag}_ckpt`,
      `KV_${n.tag}_ckpt_head`,
    ])
      await nats.jsm.streams.delete(s).catch(() => undefined);
}

/** Every partition's consumer (`<durable>-p<k>`) has nothing pending and nothing unacked. */
export async function partitionsDrained(
  nats: NatsHandle,
  names: StreamNames,
  partitions: number,
  durable = `${names.tag}_pipeline`,
): Promise<boolean> {
  for (let k = 0; k < partitions; k++) {
    const info = await nats.jsm.consumers.info(names.events, `${durable}-p${k}`).catch(() => null);
    if (!info || info.num_pending > 0 || info.num_ack_pending > 0) return false;
  }
  return true;
}

/** A producer's subject for an event of `delivery` (`<tag>.delivery.events.<partition>.<delivery>`). */
export function eventSubjectFor(names: StreamNames, delivery: string, partitions: number): string {
  return eventSubject(`${names.tag}.delivery.events`, delivery, partitions);
}

export interface StoredMessage {
  subject: string;
  data: Uint8Array;
  msgId?: string;
  json<T = Record<string, unknown>>(): T;
}

const text = new TextDecoder();

/**
 * Every message of a stream (optionally of one subject filter), in order, read to the consumer's own end
 * (`pending` 0 on the last delivery) and at least to the count stream info gave before the read. In a cluster
 * either can be short on its own: right after a leader change the info's count can be behind what the
 * consumer then delivers, and a consumer on a replica still catching up sees fewer messages than the leader
 * counted. Past `pending` 0 the read waits up to 10 s for the counted rest, then returns what it has (the
 * caller's check fails on its point).
 */
export async function readStream(
  nats: NatsHandle,
  stream: string,
  filter?: string,
): Promise<StoredMessage[]> {
  const info = await nats.jsm.streams.info(stream, filter ? { subjects_filter: filter } : undefined);
  const counted = filter
    ? Object.values(info.state.subjects ?? {}).reduce((a, b) => a + b, 0)
    : info.state.messages;
  const out: StoredMessage[] = [];
  if (counted === 0) return out;
  const consumer = await nats.js.consumers.get(stream, {
    deliver_policy: DeliverPolicy.All,
    ...(filter ? { filter_subjects: filter } : {}),
  });
  const messages: ConsumerMessages = await consumer.consume();
  let waiting: NodeJS.Timeout | undefined;
  for await (const m of messages) {
    clearTimeout(waiting);
    const msgId = m.headers?.get('Nats-Msg-Id');
    const data = m.data;
    out.push({
      subject: m.subject,
      data,
      ...(msgId ? { msgId } : {}),
      json: <T>() => JSON.parse(text.decode(data)) as T,
    });
    if (m.info.pending > 0) continue;
    if (out.length >= counted) break;
    waiting = setTimeout(() => void messages.close(), 10_000);
  }
  clearTimeout(waiting);
  await messages.close();
  return out;
}

export async function waitFor(
  what: string,
  check: () => boolean | Promise<boolean>,
  timeoutMs = 20_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** `streaminfer pipeline` as a child process, and what its supervisor said. */
export interface PipelineCli {
  child: ChildProcess;
  output: () => string;
  /** Every 'pipeline ready' so far: the pipeline process's pid and admin port, one per (re)start. */
  readies: () => Array<{ admin: number; pid: number }>;
  /** Resolves at the n-th 'pipeline ready' (1-based); rejects with the output if the command exits first. */
  ready: (n?: number) => Promise<{ admin: number; pid: number }>;
  exited: Promise<number | null>;
}

export function startPipelineCli(args: string[], env: Record<string, string> = {}): PipelineCli {
  const child = runCli(['pipeline', ...args], env);
  let output = '';
  child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const readies = () =>
    output
      .split('\n')
      .filter((l) => l.includes('"pipeline ready"') && l.includes('stream-supervisor'))
      .map((l) => JSON.parse(l) as { admin: number; pid: number });
  return {
    child,
    output: () => output,
    readies,
    exited,
    ready: async (n = 1) => {
      await waitFor(
        `pipeline ready #${n}`,
        () => readies().length >= n || child.exitCode !== null,
        90_000,
      ).catch((err: Error) => {
        throw new Error(`${err.message}\n${output.slice(-3000)}`);
      });
      const r = readies()[n - 1];
      if (!r) throw new Error(`pipeline exited (${child.exitCode}):\n${output.slice(-3000)}`);
      return r;
    },
  };
}

/**
 * A pipeline config file on a test's own streams, subject root and durable (`<tag>_pipeline`), admin port 0,
 * its side-output spool in the config's directory;
 * `consumer` is merged into the consumer settings, `over` replaces top-level ones.
 */
export function writePipelineConfig(
  names: StreamNames,
  consumer: Record<string, unknown>,
  over: Record<string, unknown> = {},
): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'pipeline-config-'));
  const file = path.join(dir, 'pipeline.json');
  writeFileSync(
    file,
    JSON.stringify({
      nats: NATS_URL,
      subjectRoot: names.tag,
      streams: { events: names.events, predictions: names.predictions, side: names.side },
      consumer: { durable: `${names.tag}_pipeline`, ...consumer },
      instance: { leaseBucket: `${names.tag}_leases`, leaseTtlMs: 6000 },
      admin: { port: 0 },
      ...over,
      // Beside the config: every restart of this pipeline finds its side-output spool, no other test's.
      spool: { dir: path.join(dir, 'spool'), ...(over.spool as Record<string, unknown> | undefined) },
    }),
  );
  return file;
}

/** SIGTERM (the pipeline process drains and exits with its supervisor), SIGKILL after 10 s. */
export async function stopChild(c: ChildProcess): Promise<void> {
  if (c.exitCode !== null || c.signalCode !== null) return;
  const exited = new Promise((resolve) => c.once('exit', resolve));
  c.kill('SIGTERM');
  const timer = setTimeout(() => c.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(timer);
}

const WORKLOAD_T0 = Date.UTC(2026, 10, 8, 10, 0, 0);
const workloadIso = (ms: number) => new Date(ms).toISOString().replace('.000Z', 'Z');

/**
 * The delivery workload of the pipeline tests: a pickup at 2026-11-08T10:00Z (when `from` is 0), then GPS points
 * `from` … `from + count - 1`, one every 5 s, driving north. Ids: `st-<delivery>`, `<delivery>-g<i>`.
 */
export function pickupThenGps(
  delivery: string,
  from: number,
  count: number,
): Array<{ id: string; payload: string }> {
  const out: Array<{ id: string; payload: string }> = [];
  if (from === 0)
    out.push({
      id: `st-${delivery}`,
      payload: JSON.stringify({
        event_id: `st-${delivery}`,
        delivery_id: delivery,
        event_time: workloadIso(WORKLOAD_T0),
        type: 'status',
        status: 'picked_up',
        promised_time: workloadIso(WORKLOAD_T0 + 12 * 60_000),
        dest_lat: 13.02,
        dest_lon: 77.5946,
        route_id: 'r1',
      }),
    });
  for (let i = from; i < from + count; i++) {
    const id = `${delivery}-g${i}`;
    out.push({
      id,
      payload: JSON.stringify({
        event_id: id,
        delivery_id: delivery,
        event_time: workloadIso(WORKLOAD_T0 + (i + 1) * 5_000),
        type: 'gps',
        driver_lat: 12.9716 + i * 0.0002,
        driver_lon: 77.5946,
      }),
    });
  }
  return out;
}
