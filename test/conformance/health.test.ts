/**
 * Conformance: the pipeline's `/health` tells the truth, judged from outside — the
 * `streaminfer pipeline` process, its admin listener (/health, /metrics, the recover route and CLI) and the
 * broker's streams.
 *
 * - A stalled pipeline is stale while it is stalled: paused with 748 events waiting against a lag SLO of
 *   300 (all of them fetched: the broker's num_pending alone sees none), `stale` turns true within seconds
 *   — the oldest unprocessed event ages while nothing is published — and clears soon after it caught up.
 * - NATS down: /health is 503 and says why; back to 200 once the broker is back, predicting again.
 * - A corrupt checkpoint pointer: the partition is `failed` (503, a metric), retried with a backoff (a
 *   handful of log lines, not a hot loop), and `streaminfer pipeline recover` brings it back from the
 *   previous checkpoint or from the ack floor, every event predicted once.
 *
 * The dev broker is STREAMINFER_TEST_NATS (default 127.0.0.1:4222); the broker-down case runs a nats-server
 * of its own, of the dev broker's release (Debian's 2.9 or the current one).
 */
import type { ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { Kvm } from '@nats-io/kv';
import { connectNats, type NatsHandle } from '../../apps/pipeline';
import type { Prediction } from '../../libs/delivery';
import { modelsSubset, runCliToExit } from '../integration/harness';
import {
  deleteStreams,
  eventSubjectFor,
  NATS_URL,
  type PipelineCli,
  readStream,
  type StreamNames,
  startPipelineCli,
  uniqueNames,
  waitFor,
  writePipelineConfig,
} from '../integration/pipeline-kit';
import { brokerBinaryLike, ownBroker } from './own-broker';

const PARTITIONS = 2;
let nats: NatsHandle;
const created: StreamNames[] = [];
const children: ChildProcess[] = [];
const models = modelsSubset(['delay-risk']);

beforeAll(async () => {
  nats = await connectNats({ servers: NATS_URL, name: 'conformance-health' });
});

afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  await deleteStreams(nats, created);
  await nats.close();
});

function start(file: string, args: string[] = []): PipelineCli {
  const cli = startPipelineCli(['--config', file, ...args]);
  children.push(cli.child);
  return cli;
}

async function stop(cli: PipelineCli): Promise<void> {
  cli.child.kill('SIGTERM');
  await cli.exited;
}

function config(names: StreamNames, over: Record<string, unknown> = {}): string {
  return writePipelineConfig(
    names,
    { maxAckPending: 2048, ackWaitMs: 30_000, batchSize: 512 },
    {
      partitions: PARTITIONS,
      concurrency: 256,
      logLevel: 'info',
      inference: { mode: 'embedded', modelsDir: models },
      checkpoint: { enabled: true, intervalMs: 1_000, bucket: `${names.tag}_ckpt` },
      ...over,
    },
  );
}

interface Health {
  status: number;
  body: {
    consuming?: boolean;
    stale?: boolean;
    not_consuming?: string[];
    stale_reasons?: string[];
    partitions_failed?: Array<{ partition: number; state: string; attempts: number }>;
    checkpoint?: { last_id: number | null };
    consumer?: { pending: number; ack_pending: number; unprocessed: number };
  };
}

async function health(admin: number): Promise<Health> {
  try {
    const res = await fetch(`http://127.0.0.1:${admin}/health`, { signal: AbortSignal.timeout(5000) });
    return { status: res.status, body: (await res.json()) as Health['body'] };
  } catch (err) {
    return { status: 0, body: { not_consuming: [String(err)] } };
  }
}

async function post(admin: number, route: string): Promise<number> {
  const res = await fetch(`http://127.0.0.1:${admin}${route}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: '{}',
  });
  await res.text();
  return res.status;
}

/** One delivery: its pickup, then `gps` GPS points (one prediction each), timed now. */
function delivery(
  id: string,
  gps: number,
  from = 0,
): Array<{ id: string; delivery: string; payload: string }> {
  const now = Date.now();
  const at = (ms: number) => new Date(ms).toISOString();
  const out: Array<{ id: string; delivery: string; payload: string }> = [];
  if (from === 0)
    out.push({
      id: `st-${id}`,
      delivery: id,
      payload: JSON.stringify({
        event_id: `st-${id}`,
        delivery_id: id,
        event_time: at(now - 2000),
        type: 'status',
        status: 'picked_up',
        promised_time: at(now + 30 * 60_000),
        dest_lat: 13.02,
        dest_lon: 77.5946,
        route_id: 'r1',
      }),
    });
  for (let i = from; i < from + gps; i++)
    out.push({
      id: `${id}-g${i}`,
      delivery: id,
      payload: JSON.stringify({
        event_id: `${id}-g${i}`,
        delivery_id: id,
        event_time: at(now - 1000 + i),
        type: 'gps',
        driver_lat: 12.9716 + i * 0.0001,
        driver_lon: 77.5946,
      }),
    });
  return out;
}

async function publish(
  handle: NatsHandle,
  names: StreamNames,
  events: Array<{ id: string; delivery: string; payload: string }>,
): Promise<void> {
  await Promise.all(
    events.map((e) =>
      handle.js.publish(eventSubjectFor(names, e.delivery, PARTITIONS), e.payload, { msgID: e.id }),
    ),
  );
}

async function predictions(handle: NatsHandle, names: StreamNames): Promise<Prediction[]> {
  return (await readStream(handle, names.predictions, `${names.tag}.delivery.predictions.>`)).map((m) =>
    m.json<Prediction>(),
  );
}

/** The partition a delivery id lands in (as producers compute it: eventSubjectFor's partition token). */
function partitionOf(names: StreamNames, id: string): number {
  return Number(eventSubjectFor(names, id, PARTITIONS).split('.').at(-2));
}

/** Deliveries whose events land in `partition`. */
function deliveriesIn(names: StreamNames, partition: number, prefix: string, count: number): string[] {
  const out: string[] = [];
  for (let i = 0; out.length < count; i++)
    if (partitionOf(names, `${prefix}${i}`) === partition) out.push(`${prefix}${i}`);
  return out;
}

/** CPU seconds (user + system) of a process so far, from /proc. */
function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

describe('conformance: /health', () => {
  it('a stalled pipeline is stale while stalled (the backlog fetched, nothing published) and clears once caught up', async () => {
    const names = uniqueNames('chs');
    created.push(names);
    const cli = start(config(names, { slo: { freshnessP95Ms: 2000, lagMessages: 300 } }));
    const { admin } = await cli.ready();
    await waitFor('consuming', async () => (await health(admin)).status === 200, 20_000);

    await publish(nats, names, delivery('warm', 19));
    await waitFor('19 predictions', async () => (await predictions(nats, names)).length >= 19, 20_000);
    expect((await health(admin)).body.stale).toBe(false);

    // Stalled: 748 events (44 deliveries, 704 GPS points) arrive while nothing is processed.
    expect(await post(admin, '/api/pause')).toBe(200);
    const backlog = Array.from({ length: 44 }, (_, i) => delivery(`b${i}`, 16)).flat();
    expect(backlog.length).toBe(748);
    await publish(nats, names, backlog);
    const pausedAt = Date.now();
    let staleAfterMs: number | null = null;
    let seen: Health | undefined;
    while (Date.now() - pausedAt < 10_000) {
      seen = await health(admin);
      if (seen.body.stale === true) {
        staleAfterMs = Date.now() - pausedAt;
        break;
      }
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
    console.log(`stall: stale after ${staleAfterMs} ms; ${JSON.stringify(seen?.body.stale_reasons)}`);
    expect(staleAfterMs).not.toBeNull();
    expect(seen!.body.stale_reasons!.join('; ')).toMatch(/unprocessed/);
    // Paused by the operator is still consuming: stale, not down.
    expect(seen!.status).toBe(200);
    // Every one of them counts (none is at the broker any more: the client fetched them all), and the
    // oldest one ages while nothing is published.
    await waitFor(
      '748 unprocessed',
      async () => (await health(admin)).body.consumer?.unprocessed === 748,
      5_000,
    );
    console.log(`stall: consumer ${JSON.stringify((await health(admin)).body.consumer)}`);
    await waitFor(
      'the oldest unprocessed event past the freshness SLO',
      async () =>
        ((await health(admin)).body.stale_reasons ?? []).some((r) =>
          r.startsWith('oldest unprocessed event'),
        ),
      10_000,
    );

    expect(await post(admin, '/api/resume')).toBe(200);
    await waitFor(
      'the backlog predicted',
      async () => (await predictions(nats, names)).length >= 19 + 704,
      60_000,
    );
    const drainedAt = Date.now();
    await waitFor('stale clears', async () => (await health(admin)).body.stale === false, 20_000);
    console.log(`stall: stale cleared ${Date.now() - drainedAt} ms after the backlog was predicted`);
    const all = await predictions(nats, names);
    expect(new Set(all.map((p) => p.decision_id)).size).toBe(all.length);
    await stop(cli);
  }, 150_000);

  it('NATS down: 503 naming the broker, 200 and predicting again once it is back', async () => {
    const { name, binary } = brokerBinaryLike(nats.nc.info?.version ?? '');
    const broker = await ownBroker(binary);
    const own = await connectNats({ servers: broker.url, name: 'conformance-health-own' });
    const names = uniqueNames('chn');
    try {
      const cli = start(
        config(names, {
          nats: broker.url,
          instance: { leaseBucket: `${names.tag}_leases`, leaseTtlMs: 6000 },
        }),
      );
      const { admin } = await cli.ready();
      await waitFor('consuming', async () => (await health(admin)).status === 200, 20_000);
      await publish(own, names, delivery('n1', 5));
      await waitFor('5 predictions', async () => (await predictions(own, names)).length >= 5, 20_000);
      await own.close();

      await broker.kill();
      const answers: Health[] = [];
      for (let i = 0; i < 8; i++) {
        await new Promise((resolve) => setTimeout(resolve, 750));
        answers.push(await health(admin));
      }
      console.log(
        `broker down (${name}): ${answers.map((a) => a.status).join(' ')}; ${answers.at(-1)!.body.not_consuming?.join('; ')}`,
      );
      // The first answer may still come before the client noticed; the rest must not be 200.
      expect(answers.slice(2).every((a) => a.status === 503)).toBe(true);
      expect(answers.at(-1)!.body.consuming).toBe(false);
      expect(answers.at(-1)!.body.not_consuming!.join('; ')).toMatch(/NATS/);

      await broker.start();
      const back = Date.now();
      await waitFor('200 again', async () => (await health(admin)).status === 200, 60_000);
      console.log(`broker back (${name}): 200 after ${Date.now() - back} ms`);
      const again = await connectNats({ servers: broker.url, name: 'conformance-health-own2' });
      try {
        await publish(again, names, delivery('n1', 5, 5));
        await waitFor('10 predictions', async () => (await predictions(again, names)).length >= 10, 30_000);
      } finally {
        await again.close();
      }
      await stop(cli);
    } finally {
      await own.close().catch(() => undefined);
      await broker.dispose();
    }
  }, 150_000);

  it('a corrupt checkpoint pointer: the partition is failed (503, metric, backoff), and recover brings it back without loss', async () => {
    const names = uniqueNames('chc');
    created.push(names);
    const file = config(names);
    const [d0, d1, d2] = deliveriesIn(names, 0, 'c', 3) as [string, string, string];
    const first = start(file);
    const { admin } = await first.ready();
    await waitFor('consuming', async () => (await health(admin)).status === 200, 20_000);
    await publish(nats, names, delivery(d0, 10));
    await waitFor('10 predictions', async () => (await predictions(nats, names)).length >= 10, 20_000);
    // A completed checkpoint covering them, then a later one: the previous generation is kept.
    await waitFor(
      'two checkpoints',
      async () => ((await health(admin)).body.checkpoint?.last_id ?? 0) >= 3,
      20_000,
    );
    await stop(first);

    const kv = await new Kvm(nats.js).open(`${names.tag}_ckpt_head`);
    const key = `${names.tag}_pipeline.p0`;
    await kv.put(key, '{"id": 7, "object": '); // truncated JSON: what a torn write or a bad hand edit leaves

    const second = start(file);
    const ready = await second.ready();
    const window = 6_000;
    const logBefore = second.output().length;
    const cpuBefore = cpuSeconds(ready.pid);
    await new Promise((resolve) => setTimeout(resolve, window));
    const cpu = (cpuSeconds(ready.pid) - cpuBefore) / (window / 1000);
    const errorLines = second
      .output()
      .slice(logBefore)
      .split('\n')
      .filter((l) => l.includes('"level":50')).length;
    const failed = await health(ready.admin);
    const metrics = await (await fetch(`http://127.0.0.1:${ready.admin}/metrics`)).text();
    console.log(
      `corrupt pointer: ${errorLines} error lines and ${(cpu * 100).toFixed(0)} % of a core over ${window} ms; /health ${failed.status} ${JSON.stringify(failed.body.partitions_failed)}`,
    );
    expect(failed.status).toBe(503);
    expect(failed.body.partitions_failed).toEqual([
      expect.objectContaining({ partition: 0, state: 'failed' }),
    ]);
    expect(failed.body.not_consuming!.join('; ')).toMatch(/partition 0 failed: .*not JSON/);
    expect(metrics).toContain('streaminfer_stream_partition_failed{partition="0"} 1');
    expect(errorLines).toBeLessThanOrEqual(6);
    expect(cpu).toBeLessThan(0.3);

    // Recover from the previous checkpoint: what came after it is replayed, nothing published twice.
    await publish(nats, names, delivery(d0, 5, 10));
    const recovered = await runCliToExit([
      'pipeline',
      'recover',
      '--partition',
      '0',
      '--from',
      'previous',
      '--admin-url',
      `http://127.0.0.1:${ready.admin}`,
    ]);
    expect(recovered.out).toMatch(
      /partition 0: pointer kept aside as .*quarantined, restored from previous .*: running/,
    );
    expect(recovered.code).toBe(0);
    await waitFor('200 after recover', async () => (await health(ready.admin)).status === 200, 20_000);
    await publish(nats, names, delivery(d1, 5));
    await waitFor('d0 and d1 predicted', async () => (await predictions(nats, names)).length >= 20, 30_000);
    // A running partition is not recovered.
    const again = await runCliToExit([
      'pipeline',
      'recover',
      '--partition',
      '0',
      '--from',
      'previous',
      '--admin-url',
      `http://127.0.0.1:${ready.admin}`,
    ]);
    expect(again.code).toBe(1);
    expect(again.out).toMatch(/409 conflict/);
    await stop(second);

    // Once more, recovering from the ack floor (keyed state empty: a new delivery is predicted from its pickup).
    await kv.put(key, '{"id":1}');
    const third = start(file);
    const r3 = await third.ready();
    await waitFor(
      'failed again',
      async () => (await health(r3.admin)).body.partitions_failed?.length === 1,
      20_000,
    );
    const floor = await runCliToExit([
      'pipeline',
      'recover',
      '--partition',
      '0',
      '--from',
      'ack-floor',
      '--admin-url',
      `http://127.0.0.1:${r3.admin}`,
    ]);
    expect(floor.out).toMatch(/restored from ack-floor .*: running/);
    expect(floor.code).toBe(0);
    await publish(nats, names, delivery(d2, 5));
    await waitFor(
      'd2 predicted',
      async () => (await predictions(nats, names)).some((p) => p.event_id === `${d2}-g4`),
      30_000,
    );
    const all = await predictions(nats, names);
    expect(new Set(all.map((p) => p.decision_id)).size).toBe(all.length);
    for (const id of [d0, d1, d2])
      expect(
        new Set(all.filter((p) => p.delivery_id === id && p.revision === 0).map((p) => p.event_id)).size,
      ).toBe(id === d0 ? 15 : 5);
    await stop(third);
  }, 180_000);
});
