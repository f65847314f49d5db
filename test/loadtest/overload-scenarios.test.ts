import type { AddressInfo } from 'node:net';
import { WebSocketServer } from 'ws';
import { parseKernelQueues, SlowClient } from '../../loadtest/harness/slow-client';
import type { LoadResult } from '../../loadtest/harness/stats';
import type { RunRecord } from '../../loadtest/harness/types';
import { judgeOverload, overloadFigures } from '../../loadtest/scenarios/overload';
import { checkRunaway, judgeRunaway } from '../../loadtest/scenarios/runaway';
import {
  judgeSlowConsumer,
  rssFigures,
  type SlowEpisode,
  slowCloseLogKeys,
} from '../../loadtest/scenarios/slow-consumer';

function load(over: Partial<LoadResult>): LoadResult {
  return {
    url: 'ws://x',
    body: 'echo-floats',
    connections: 1,
    connectionsOpened: 1,
    requestsPerConnection: 1,
    inFlightPerConnection: 1,
    ratePerConnection: null,
    warmupPerConnection: 0,
    loadgenProcesses: 1,
    loadgenCpuPct: [10],
    sent: 0,
    completed: 0,
    ok: 0,
    errorCount: 0,
    errors: {},
    warningCount: 0,
    warnings: {},
    unmatched: 0,
    notSent: 0,
    durationMs: 1000,
    throughputRps: 0,
    completedRps: 0,
    latencyMs: { count: 0, min: 0, mean: 0, p50: 0, p90: 0, p95: 0, p99: 0, p999: 0, max: 0 },
    versions: {},
    connectFailures: [],
    closes: [],
    stoppedBy: 'completed',
    warmupErrors: 0,
    timeline: { bucketMs: 1000, points: [] },
    ...over,
  };
}

describe('runaway checks', () => {
  const runaway = load({
    ok: 650,
    errors: { rate_limited: 5000 },
    errorCount: 5000,
    durationMs: 5500,
    retryAfterMs: { rate_limited: { count: 5000, min: 1, p50: 5, p90: 9, max: 10, mean: 5 } },
  });

  it('checkRunaway: what the bucket allows and the bounds', () => {
    expect(checkRunaway(runaway, 100, 100)).toMatchObject({
      rateLimited: 5000,
      admitted: 650,
      bucketAllows: 650,
      retryAfterBoundMs: 1000,
      oneTokenBoundMs: 10,
    });
  });

  it('judgeRunaway passes a clean run and fails each figure on its own', () => {
    const c = checkRunaway(runaway, 100, 100);
    expect(judgeRunaway(2, 2.5, 0, [c]).map((v) => v.pass)).toEqual([true, true, true, true, true]);
    const bad = judgeRunaway(2, 3.2, 1, [{ ...c, admitted: 800, retryAfter: { ...c.retryAfter!, min: 0 } }]);
    expect(bad.map((v) => v.pass)).toEqual([false, false, true, false, false]);
    expect(bad[1]!.detail).toMatch(/over by 7%/);
    expect(judgeRunaway(undefined, undefined, undefined, []).map((v) => v.pass)).toEqual([
      undefined,
      undefined,
      undefined,
      undefined,
      undefined,
    ]);
  });
});

describe('overload figures', () => {
  const run = (target: string, ok: number, shed: number, shedP99: number, metric: number): RunRecord => ({
    label: target,
    target,
    load: load({
      sent: ok + shed,
      ok,
      errors: { overloaded: shed },
      errorCount: shed,
      latencyMs: { count: ok, min: 1, mean: 60, p50: 60, p90: 62, p95: 63, p99: 64, p999: 64, max: 64 },
      errorLatencyMs: {
        overloaded: { count: shed, min: 0.2, mean: 1, p50: 1, p90: 2, p95: 3, p99: shedP99, p999: 5, max: 6 },
      },
      retryAfterMs: { overloaded: { count: shed, min: 59, p50: 61, p90: 62, max: 63, mean: 61 } },
    }),
    metrics: {
      shedModelQueueFull: metric,
      shedRingFull: 0,
      serverUnder05ms: 99,
      serverUnder1ms: 100,
      serverUnder25ms: 100,
    },
  });

  it('overloadFigures reads admitted, shed, latencies, retry_after and the metric', () => {
    expect(overloadFigures(run('honours-retry-after', 104, 696, 4.2, 696))).toMatchObject({
      attempts: 800,
      admitted: 104,
      shed: 696,
      other: 0,
      admittedP99Ms: 64,
      shedP99Ms: 4.2,
      retryAfterP50Ms: 61,
      shedMetric: 696,
      serverShedWithin05ms: 0.99,
    });
  });

  it('judgeOverload: shed p99 under 5 ms, every attempt answered, metric = client count', () => {
    const v = judgeOverload(800, {
      'honours-retry-after': [overloadFigures(run('honours-retry-after', 104, 696, 4.2, 696))!],
      'resends-at-once': [overloadFigures(run('resends-at-once', 8, 790, 6.6, 791))!],
    });
    expect(v.map((x) => x.pass)).toEqual([true, true, true, false, false, false]);
  });
});

describe('slow consumer figures', () => {
  const samples = [
    { t: 0, mib: 160 },
    { t: 1, mib: 170 },
    { t: 2, mib: 200 },
    { t: 3, mib: 190 },
    { t: 4, mib: 240 },
  ];

  it('rssFigures: reference at or before the start, peak within the window', () => {
    expect(rssFigures(samples, 1.5, 3.5)).toEqual({
      startMiB: 170,
      startAtS: 1,
      peakMiB: 200,
      peakAtS: 2,
      endMiB: 190,
      growthMiB: 30,
    });
    expect(rssFigures(samples, 1.5)).toMatchObject({ peakMiB: 240, growthMiB: 70 });
    expect(rssFigures([], 1)).toEqual({});
  });

  it('judgeSlowConsumer', () => {
    const ep = (index: number, phase: 'single' | 'repeated', code?: number): SlowEpisode => ({
      index,
      phase,
      openedAtS: index,
      stoppedAtS: index + 6,
      stoppedBy: code === undefined ? 'end-of-run' : 'server',
      sent: 3000,
      bytesSent: 12e6,
      floodMs: 6000,
      answersRead: 3000,
      errorAnswers: {},
      warnings: { slow_consumer: 1 },
      messagesRead: 3001,
      bytesRead: 12e6,
      socketErrors: [],
      ...(code === undefined ? {} : { closeCode: code }),
    });
    const normal: RunRecord = { label: 'n', target: 'normal', load: load({ ok: 100 }) };
    const v = judgeSlowConsumer(
      rssFigures(samples, 1.5, 3.5),
      rssFigures(samples, 1.5),
      [ep(1, 'single', 1013), ep(2, 'repeated', 1013), ep(3, 'repeated')],
      normal,
    );
    expect(v.map((x) => x.pass)).toEqual([true, true, true, false, true]);
    const w = judgeSlowConsumer({}, {}, [ep(1, 'single', 1006)], {
      ...normal,
      load: load({ errorCount: 1 }),
    });
    expect(w.map((x) => x.pass)).toEqual([undefined, false, false, undefined, false]);
  });
});

describe('slow client', () => {
  it('parseKernelQueues finds both ends of a connection in /proc/net/tcp text', () => {
    const text = [
      '  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode',
      '   0: 0100007F:9C40 0100007F:D431 01 003F9000:00000000 01:00000014 00000000     0        0 1 1',
      '   1: 0100007F:D431 0100007F:9C40 01 00000000:0001DA2F 00:00000000 00000000     0        0 2 1',
    ].join('\n');
    expect(parseKernelQueues(text, 0xd431, 0x9c40)).toEqual({ clientRecvQ: 0x1da2f, serverSendQ: 0x3f9000 });
    expect(parseKernelQueues(text, 1, 2)).toBeUndefined();
  });

  it('floods without reading, then reads what was waiting and the close code', async () => {
    const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
    await new Promise<void>((r) => wss.once('listening', () => r()));
    let received = 0;
    wss.on('connection', (ws) => {
      ws.on('message', () => {
        received++;
        ws.send('x'.repeat(2000));
        if (received === 50) ws.close(1013, 'slow consumer');
      });
    });
    const url = `ws://127.0.0.1:${(wss.address() as AddressInfo).port}/ws`;
    const client = new SlowClient(url, (id) => `{"id":${id}}`, 500);
    await client.open();
    client.startFlood();
    for (let i = 0; i < 100 && received < 50; i++) await new Promise((r) => setTimeout(r, 20));
    const r = await client.resumeAndDrain({ timeoutMs: 3000 });
    expect(r.closeCode).toBe(1013);
    expect(r.sent).toBeGreaterThanOrEqual(50);
    expect(r.answersRead).toBe(50);

    // a client the server never closes: it closes itself once nothing more arrives
    const quiet = new SlowClient(url, (id) => `{"id":${id}}`, 100, 1);
    await quiet.open();
    quiet.startFlood();
    await new Promise((r) => setTimeout(r, 100));
    const q = await quiet.resumeAndDrain({ timeoutMs: 3000, quietMs: 200 });
    expect(q.endedByClient).toBe('close');
    expect(q.closeCode).toBeUndefined();
    await new Promise<void>((r) => wss.close(() => r()));
  });
});

describe('slow-consumer log detection', () => {
  it('slowCloseLogKeys keys the server log lines of slow-consumer closes', () => {
    const log = [
      '{"level":30,"time":1,"msg":"listening"}',
      '{"level":40,"time":5,"pid":7,"connection":3,"buffered":8391664,"msg":"slow consumer closed (1013)"}',
      'not json but slow consumer closed',
      '{"level":40,"time":9,"pid":7,"connection":4,"msg":"slow consumer closed (1013)"}',
    ].join('\n');
    expect([...slowCloseLogKeys(log)]).toEqual(['7:3:5', 'not json but slow consumer closed', '7:4:9']);
  });
});
