/**
 * slow-consumer: a client that never reads its answers must not grow the server's memory, must
 * be closed with 1013, and must not disturb anyone else. A slow WebSocket client sends `echo`
 * requests with a 4 KiB text (so every answer is ~4 KiB) at a steady rate and never reads
 * (`SlowClient`: the socket is paused, so the kernel queues fill and then the server's own
 * buffer); 10 normal clients send small requests at 20 req/s each throughout. When the server
 * closes the slow client (seen in /metrics, polled 4×/s), the client resumes reading to see the
 * close code. Two phases of 60 s each (15 s with --quick), on one server:
 *
 *   single    — the setup: one slow client; after it is closed, the rest of the 60 s shows
 *               whether the memory stays put;
 *   repeated  — a stress beyond the issue: each time a slow client is closed, a new one takes its
 *               place, for 60 s.
 *
 * Before them, a client that reads sends the same traffic for a few seconds, so the memory that
 * serving such traffic costs once (ring pages, heap size) is not charged to the slow clients. The
 * server's RSS (its whole process tree, /proc) is sampled every second.
 */
import * as fs from 'node:fs';
import { performance } from 'node:perf_hooks';
import { fmt, markdownTable } from '../../scripts/markdown';
import { type MetricSample, scrapeMetrics, sumSamples } from '../harness/metrics';
import {
  errText,
  measureSafe,
  modelsDirWith,
  sleep,
  stampSharedServer,
  standardNotes,
  timelineChart,
  type Verdict,
  verdictNote,
  verdictTable,
  withServer,
} from '../harness/scenario-kit';
import { processRssBytes, processTreeRssBytes, type ServerHandle } from '../harness/server-process';
import { SlowClient, type SlowClientResult } from '../harness/slow-client';
import { lineChart, PALETTE } from '../harness/svg-chart';
import type { Chart, LoadSpec, RunRecord, Scenario, ScenarioContext, ScenarioResult } from '../harness/types';

const MIB = 1024 * 1024;
export const SLOW_TARGETS = {
  /** server RSS peak − RSS when the flood started, below */
  rssGrowthMiB: 64,
  closeCode: 1013,
} as const;
/** the slow client's send rate and the size of its text (its answers echo it) */
const SLOW_RATE = 500;
const SLOW_TEXT_BYTES = 4096;
/** normal clients */
const NORMAL_RATE = 20;
/** the rate limit this scenario runs with: above the slow client's rate, so the flood is not refused */
const RATE_LIMIT_RPS = 1000;
/** how often the server's log is checked for a slow-consumer close (free: the bench already reads it) */
const POLL_MS = 250;
/**
 * how often /metrics is checked as well, in case the log line is missing: scraping is not free —
 * on this server every scrape costs the supervisor and node processes memory for a while, which
 * would land in the RSS figure this scenario is about
 */
const METRICS_EVERY_MS = 2000;
/** seconds of the same traffic from a reading client before the flood */
const WARM_SECONDS = 6;
const RSS_EVERY_MS = 1000;

export type PhaseName = 'single' | 'repeated';

export interface PhaseRecord {
  name: PhaseName;
  /** seconds since the normal clients' clock started */
  startS: number;
  endS: number;
  /** slow clients allowed one after the other (Infinity: replaced each time one is closed) */
  clients: number;
}

export interface SlowEpisode extends SlowClientResult {
  index: number;
  phase: PhaseName;
  /** seconds since the normal clients' clock started */
  openedAtS: number;
  /** when the server's close was seen in /metrics (or the phase ended) */
  stoppedAtS: number;
  /** `server` when the server logged / counted a slow-consumer close during this episode; `end-of-run` otherwise */
  stoppedBy: 'server' | 'end-of-run' | 'socket';
  /** how the close was seen: the server's log line, or /metrics */
  detectedVia?: 'log' | 'metrics';
  error?: string;
}

export interface RssSample {
  /** seconds since the normal clients' clock started */
  t: number;
  /** the whole process tree */
  mib: number;
  /** the supervisor process alone (the rest is the node process with its worker threads) */
  supervisorMiB?: number;
}

export interface RssFigures {
  startMiB?: number;
  startAtS?: number;
  peakMiB?: number;
  peakAtS?: number;
  endMiB?: number;
  growthMiB?: number;
}

/**
 * RSS from the last sample at or before `fromS` (the reference) to the peak of the samples in
 * [reference, `toS`]; `endMiB` is the last sample up to `toS`.
 */
export function rssFigures(
  samples: readonly RssSample[],
  fromS: number,
  toS = Number.POSITIVE_INFINITY,
): RssFigures {
  const start = samples.filter((s) => s.t <= fromS).at(-1) ?? samples[0];
  if (!start) return {};
  const during = samples.filter((s) => s.t >= start.t && s.t <= toS);
  if (during.length === 0) return {};
  const peak = during.reduce((a, s) => (s.mib > a.mib ? s : a), during[0]!);
  return {
    startMiB: start.mib,
    startAtS: start.t,
    peakMiB: peak.mib,
    peakAtS: peak.t,
    endMiB: during.at(-1)?.mib,
    growthMiB: peak.mib - start.mib,
  };
}

const mibText = (v: number | undefined): string => (v === undefined ? '–' : `${v.toFixed(1)} MiB`);

export function judgeSlowConsumer(
  single: RssFigures,
  repeated: RssFigures,
  episodes: readonly SlowEpisode[],
  normal: RunRecord | undefined,
  details: { single?: string; repeated?: string } = {},
): Verdict[] {
  const closedByServer = episodes.filter((e) => e.stoppedBy === 'server');
  const codes = closedByServer.map((e) => e.closeCode);
  const all1013 = closedByServer.length > 0 && codes.every((c) => c === SLOW_TARGETS.closeCode);
  const firstSingle = episodes.find((e) => e.phase === 'single');
  const l = normal?.load;
  const bound = (g: number | undefined): boolean | undefined =>
    g === undefined ? undefined : g < SLOW_TARGETS.rssGrowthMiB;
  return [
    {
      name: 'server RSS growth, one slow client (peak − start of its flood)',
      target: `< ${SLOW_TARGETS.rssGrowthMiB} MiB`,
      measured: mibText(single.growthMiB),
      pass: bound(single.growthMiB),
      ...(details.single ? { detail: details.single } : {}),
    },
    {
      name: 'the slow client closed by the server with 1013',
      target: '1013',
      measured:
        firstSingle === undefined
          ? '–'
          : firstSingle.stoppedBy === 'server'
            ? String(firstSingle.closeCode ?? '?')
            : `not closed (${firstSingle.stoppedBy})`,
      pass:
        firstSingle === undefined
          ? undefined
          : firstSingle.stoppedBy === 'server' && firstSingle.closeCode === SLOW_TARGETS.closeCode,
      ...(firstSingle?.drainMs !== undefined
        ? { detail: `close frame read ${firstSingle.drainMs} ms after resuming` }
        : {}),
    },
    {
      name: 'normal clients: errors',
      target: '0',
      measured: l ? fmt(l.errorCount) : '–',
      pass: l ? l.errorCount === 0 && l.closes.length === 0 && l.connectFailures.length === 0 : undefined,
      detail: l
        ? `${fmt(l.ok)} ok over both phases, p99 ${fmt(l.latencyMs.p99)} ms` +
          (l.closes.length ? `, ${l.closes.length} connection(s) closed early` : '')
        : undefined,
    },
    {
      name: 'stress (beyond the issue): server RSS growth, slow clients replaced for the 2nd phase (peak − start of the 1st flood)',
      target: `< ${SLOW_TARGETS.rssGrowthMiB} MiB`,
      measured: mibText(repeated.growthMiB),
      pass: bound(repeated.growthMiB),
      ...(details.repeated ? { detail: details.repeated } : {}),
    },
    {
      name: 'stress: every server close was 1013',
      target: 'all 1013',
      measured: codes.length
        ? `${codes.filter((c) => c === SLOW_TARGETS.closeCode).length} of ${codes.length}`
        : 'no close',
      pass: episodes.length === 0 ? undefined : all1013,
      detail:
        `${closedByServer.length} of ${episodes.length} slow connection(s) closed by the server` +
        (episodes.length > closedByServer.length ? '; the last one was still open when its phase ended' : ''),
    },
  ];
}

function slowBody(): (id: number) => string {
  const chars = 'abcdefghijklmnopqrstuvwxyz0123456789';
  let text = '';
  for (let i = 0; i < SLOW_TEXT_BYTES; i++) text += chars[(i * 7 + (i >> 5)) % chars.length];
  const tail = `,"model":"echo","text":"${text}"}`;
  return (id) => `{"id":${id}${tail}`;
}

/**
 * Keys of the server's "slow consumer closed" log lines (pino JSON on its stdout: pid, connection,
 * time) in `text`: a key not seen before is a new close.
 */
export function slowCloseLogKeys(text: string): Set<string> {
  const keys = new Set<string>();
  for (const line of text.split('\n')) {
    if (!line.includes('slow consumer closed')) continue;
    try {
      const j = JSON.parse(line) as { pid?: unknown; connection?: unknown; time?: unknown };
      keys.add(`${String(j.pid)}:${String(j.connection)}:${String(j.time)}`);
    } catch {
      keys.add(line.trim());
    }
  }
  return keys;
}

function slowCloses(samples: readonly MetricSample[]): number {
  return Math.max(
    sumSamples(samples, 'streaminfer_slow_consumer_closes_total'),
    sumSamples(samples, 'streaminfer_shed_total', { reason: 'slow_consumer' }),
  );
}

/** The flood's length, the normal clients, and the server's environment. */
function slowSetup(ctx: ScenarioContext) {
  const floodSeconds = ctx.quick ? 15 : 60;
  const size = ctx.sizes({ connections: 10, requests: 0 }, { connections: 10, requests: 0 });
  const env = {
    STREAMINFER_RATE_LIMIT_RPS: String(RATE_LIMIT_RPS),
    STREAMINFER_RATE_LIMIT_BURST: String(RATE_LIMIT_RPS),
  };
  return { floodSeconds, size, env };
}

type SlowSetup = ReturnType<typeof slowSetup>;

/** The reading warm-up client's figures. */
interface WarmFigures {
  startS?: number;
  endS?: number;
  rssBeforeMiB?: number;
  rssAfterMiB?: number;
  sent?: number;
  answers?: number;
}

/** What the measured phases record, filled in as they go. */
interface SlowRun {
  runs: RunRecord[];
  episodes: SlowEpisode[];
  rss: RssSample[];
  notes: string[];
  idleMiB?: number;
  warm: WarmFigures;
  phases: PhaseRecord[];
  floodEndS?: number;
}

/** The normal clients, open loop for the whole scenario; ended by `stop()`. */
function startNormalClients(ctx: ScenarioContext, setup: SlowSetup, srv: ServerHandle) {
  const { floodSeconds, size } = setup;
  let t0 = 0; // performance.now() when the normal clients' clock started
  let goResolve!: () => void;
  const go = new Promise<void>((r) => {
    goResolve = r;
  });
  let stopNormal!: () => void;
  const stopWhen = new Promise<void>((r) => {
    stopNormal = r;
  });
  const normalLoad: LoadSpec = {
    connections: size.connections,
    // ended by stopWhen once the flood is over; this only bounds it
    requestsPerConnection: NORMAL_RATE * (2 * floodSeconds + WARM_SECONDS + 60),
    ratePerConnection: NORMAL_RATE,
    inFlightPerConnection: 16,
    body: 'echo-floats',
    bodyOptions: { model: 'echo' },
    warmupPerConnection: 5,
    timeLimitMs: (2 * floodSeconds + WARM_SECONDS + 60) * 1000,
    onGo: () => {
      t0 = performance.now();
      goResolve();
    },
    stopWhen,
  };
  const run = measureSafe(ctx, `normal clients (${size.connections})`, 'normal', srv, normalLoad);
  return {
    run,
    /** true once their clock started; false when the run ended before it did */
    started: Promise.race([go.then(() => true), run.then(() => false)]),
    sinceGo: (): number => (performance.now() - t0) / 1000,
    stop: (): void => stopNormal(),
  };
}

/** The server's RSS (its process tree, and the supervisor alone) every second until `stop()`. */
function sampleRss(srv: ServerHandle, sinceGo: () => number, into: RssSample[]): { stop(): Promise<void> } {
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      const mib = rssMiB(srv);
      const sup = processRssBytes(srv.pid);
      if (mib !== undefined) {
        into.push({
          t: Math.round(sinceGo() * 100) / 100,
          mib,
          ...(sup !== undefined ? { supervisorMiB: sup / MIB } : {}),
        });
      }
      await sleep(RSS_EVERY_MS);
    }
  })();
  return {
    stop: async () => {
      sampling = false;
      await sampler;
    },
  };
}

function rssMiB(srv: ServerHandle): number | undefined {
  const b = processTreeRssBytes(srv.pid);
  return b === undefined ? undefined : b / MIB;
}

/**
 * The same traffic from a client that reads, first: serving it costs the server some memory once
 * (ring pages touched for the first time, the JS heap sized to the allocation rate); the slow
 * client's growth is measured from there.
 */
async function readingWarmUp(
  srv: ServerHandle,
  body: (id: number) => string,
  sinceGo: () => number,
  rec: SlowRun,
): Promise<void> {
  const warm = rec.warm;
  await sleep(500);
  warm.startS = sinceGo();
  warm.rssBeforeMiB = rssMiB(srv);
  const reader = new SlowClient(srv.wsUrl, body, SLOW_RATE, 0, true);
  try {
    await reader.open();
    reader.startFlood();
    await sleep(WARM_SECONDS * 1000);
    const r = await reader.resumeAndDrain({ quietMs: 300, timeoutMs: 5000 });
    warm.sent = r.sent;
    warm.answers = r.answersRead;
  } catch (e) {
    rec.notes.push(`The reading warm-up client failed: ${errText(e).split('\n')[0]}`);
  }
  warm.endS = sinceGo();
  warm.rssAfterMiB = rssMiB(srv);
}

/** What the flood phases share: how a server close is noticed, and the slow clients' numbering. */
interface Flood {
  srv: ServerHandle;
  body: (id: number) => string;
  sinceGo: () => number;
  /** slow-consumer close lines already seen in the server's log */
  seenLogKeys: Set<string>;
  /** the close counter in /metrics as last read */
  closesBefore: number | undefined;
  /** the last slow client's number */
  index: number;
  rec: SlowRun;
}

/** Slow clients one after the other (at most `maxClients`) until `seconds` have passed. */
async function floodPhase(
  ctx: ScenarioContext,
  f: Flood,
  phase: PhaseName,
  seconds: number,
  maxClients: number,
): Promise<void> {
  const { srv, body, sinceGo, seenLogKeys } = f;
  const { phases, episodes } = f.rec;
  const record: PhaseRecord = {
    name: phase,
    startS: sinceGo(),
    endS: Number.NaN,
    clients: maxClients,
  };
  phases.push(record);
  const until = performance.now() + seconds * 1000;
  for (let n = 0; n < maxClients && performance.now() < until && !srv.exited(); n++) {
    f.index++;
    const index = f.index;
    const client = new SlowClient(srv.wsUrl, body, SLOW_RATE, index);
    const openedAtS = sinceGo();
    try {
      await client.open();
    } catch (e) {
      episodes.push({
        ...(await client.resumeAndDrain({ timeoutMs: 1000 })),
        index,
        phase,
        openedAtS,
        stoppedAtS: sinceGo(),
        stoppedBy: 'socket',
        error: `could not open: ${errText(e)}`,
      });
      break;
    }
    // the close counter as this client starts (a close seen only in the log leaves it behind)
    try {
      f.closesBefore = slowCloses(await scrapeMetrics(`${srv.adminUrl}/metrics`));
    } catch {
      // keep the previous value
    }
    client.startFlood();
    ctx.log(`slow client #${index} (${phase}): flooding at ${SLOW_RATE} req/s without reading`);
    let stoppedBy: SlowEpisode['stoppedBy'] = 'end-of-run';
    let detectedVia: SlowEpisode['detectedVia'];
    let lastScrape = performance.now();
    while (performance.now() < until) {
      await sleep(POLL_MS);
      if (client.isClosed()) {
        stoppedBy = 'socket';
        break;
      }
      const fresh = [...slowCloseLogKeys(srv.stdoutTail())].filter((k) => !seenLogKeys.has(k));
      if (fresh.length) {
        for (const k of fresh) seenLogKeys.add(k);
        stoppedBy = 'server';
        detectedVia = 'log';
      }
      if (stoppedBy !== 'server' && performance.now() - lastScrape >= METRICS_EVERY_MS) {
        lastScrape = performance.now();
        try {
          const closes = slowCloses(await scrapeMetrics(`${srv.adminUrl}/metrics`));
          if (f.closesBefore === undefined) f.closesBefore = closes;
          else if (closes > f.closesBefore) {
            f.closesBefore = closes;
            stoppedBy = 'server';
            detectedVia ??= 'metrics';
          }
        } catch {
          // a missed poll: try again later
        }
      }
      if (stoppedBy === 'server') break;
    }
    const stoppedAtS = sinceGo();
    // closed by the server: read up to its close frame; still open at the end: read what came, then close
    const r = await client.resumeAndDrain({
      timeoutMs: 15_000,
      serverPort: srv.port,
      ...(stoppedBy === 'server' ? {} : { quietMs: 1000 }),
    });
    episodes.push({
      ...r,
      index,
      phase,
      openedAtS,
      stoppedAtS,
      stoppedBy,
      ...(detectedVia ? { detectedVia } : {}),
    });
    ctx.log(
      `slow client #${index}: ${stoppedBy === 'server' ? 'closed by the server' : stoppedBy} after ` +
        `${(r.floodMs / 1000).toFixed(1)} s, ${r.sent} sent, close code ${r.closeCode ?? '–'}` +
        (r.kernel
          ? `, kernel queues: client ${fmt(r.kernel.clientRecvQ)} B, server ${fmt(r.kernel.serverSendQ)} B`
          : ''),
    );
  }
  // the rest of the phase: normal clients only, memory watched
  while (performance.now() < until && !srv.exited()) await sleep(Math.min(500, until - performance.now()));
  record.endS = sinceGo();
}

/** Measured phases on one server: normal clients throughout, a reading warm-up, then the two floods. */
async function driveSlowConsumer(
  ctx: ScenarioContext,
  setup: SlowSetup,
  srv: ServerHandle,
  rec: SlowRun,
): Promise<void> {
  rec.idleMiB = rssMiB(srv);
  const normal = startNormalClients(ctx, setup, srv);
  if (!(await normal.started)) {
    rec.runs.push(await normal.run);
  } else {
    // RSS every second from the normal clients' go
    const sampler = sampleRss(srv, normal.sinceGo, rec.rss);
    const body = slowBody();
    await readingWarmUp(srv, body, normal.sinceGo, rec);
    await sleep(1000);
    const flood: Flood = {
      srv,
      body,
      sinceGo: normal.sinceGo,
      seenLogKeys: slowCloseLogKeys(srv.stdoutTail()),
      closesBefore: undefined,
      index: 0,
      rec,
    };
    try {
      flood.closesBefore = slowCloses(await scrapeMetrics(`${srv.adminUrl}/metrics`));
    } catch (e) {
      rec.notes.push(`/metrics could not be read before the flood: ${errText(e).split('\n')[0]}`);
    }
    await floodPhase(ctx, flood, 'single', setup.floodSeconds, 1);
    await floodPhase(ctx, flood, 'repeated', setup.floodSeconds, Number.POSITIVE_INFINITY);
    rec.floodEndS = normal.sinceGo();
    // a few more seconds of normal traffic and RSS after the flood
    await sleep(3000);
    normal.stop();
    const run = await normal.run;
    await sampler.stop();
    rec.runs.push(run);
  }
  if (srv.exited()) {
    rec.runs.push({
      label: 'server',
      target: 'normal',
      error: `server exited during the scenario\n${srv.stderrTail().slice(-4000)}`,
    });
  }
}

/** Analysis: RSS growth per phase, the episodes, the verdicts (and the notes that go with them). */
function slowFigures(ctx: ScenarioContext, rec: SlowRun) {
  const { runs, episodes, rss, notes, idleMiB, warm } = rec;
  const { phases } = rec;
  const normal = runs.find((r) => r.target === 'normal' && r.load);
  const p1 = phases.find((p) => p.name === 'single');
  const p2 = phases.find((p) => p.name === 'repeated');
  const single = p1 ? rssFigures(rss, p1.startS, p1.endS) : {};
  const repeated = p1 && p2 ? rssFigures(rss, p1.startS, Number.POSITIVE_INFINITY) : {};
  const repeatedOwn = p2 ? rssFigures(rss, p2.startS, Number.POSITIVE_INFINITY) : {};
  const overIdle = (f: RssFigures): string =>
    f.peakMiB !== undefined && idleMiB !== undefined ? `${(f.peakMiB - idleMiB).toFixed(1)} MiB` : '–';
  const readerCost =
    warm.rssAfterMiB !== undefined && warm.rssBeforeMiB !== undefined
      ? warm.rssAfterMiB - warm.rssBeforeMiB
      : undefined;
  const peakSample = (f: RssFigures): RssSample | undefined => rss.find((x) => x.t === f.peakAtS);
  const supAt = (f: RssFigures): string => {
    const x = peakSample(f);
    return x?.supervisorMiB === undefined ? '' : ` (supervisor ${x.supervisorMiB.toFixed(0)} MiB of it)`;
  };
  /** growth split between the supervisor and the node process (gateway + worker threads) */
  const splitRows = (name: string, f: RssFigures): string[][] => {
    const a = rss.find((x) => x.t === f.startAtS);
    const b = peakSample(f);
    if (a?.supervisorMiB === undefined || b?.supervisorMiB === undefined) return [];
    const sup = b.supervisorMiB - a.supervisorMiB;
    const node = b.mib - b.supervisorMiB - (a.mib - a.supervisorMiB);
    return [
      [
        `${name} growth, split: node process (gateway + worker) / supervisor`,
        `${node.toFixed(1)} / ${sup.toFixed(1)}`,
      ],
    ];
  };
  const singleEp = episodes.filter((e) => e.phase === 'single');
  const repeatedEp = episodes.filter((e) => e.phase === 'repeated');
  const verdicts = judgeSlowConsumer(single, repeated, episodes, normal, {
    single:
      `peak ${fmt(single.peakMiB)} MiB at ${fmt(single.peakAtS)} s${supAt(single)}, ${fmt(single.endMiB)} MiB at the ` +
      `end of the phase; over idle ${overIdle(single)}, of which the reading client’s same traffic took ` +
      `${mibText(readerCost)}`,
    repeated:
      `${repeatedEp.length} slow clients in ${fmt(p2 ? p2.endS - p2.startS : undefined)} s; peak ${fmt(repeated.peakMiB)} MiB ` +
      `at ${fmt(repeated.peakAtS)} s${supAt(repeated)}; growth within the phase ${mibText(repeatedOwn.growthMiB)}; ` +
      `over idle ${overIdle(repeated)}` +
      (repeated.growthMiB !== undefined && repeated.growthMiB >= SLOW_TARGETS.rssGrowthMiB
        ? `; over the bound by ${(repeated.growthMiB - SLOW_TARGETS.rssGrowthMiB).toFixed(1)} MiB`
        : ''),
  });
  notes.push(verdictNote('Done-when (the first three are the issue’s figures)', verdicts));
  notes.push(...standardNotes(runs, ctx.cores));
  const kernelSeen = episodes.find((e) => e.kernel);
  notes.push(
    'How the slow client stops reading: `ws.pause()` pauses its `net.Socket`, so Node stops reading from the kernel ' +
      'once its small stream buffer is full; the answers then fill this socket’s receive queue, the server’s kernel ' +
      'send queue, and only then the server’s own buffer (what `getBufferedAmount` and the 1013 limit see).' +
      (kernelSeen?.kernel
        ? ` When the first flood stopped: client receive queue ${fmt(kernelSeen.kernel.clientRecvQ)} B, server send ` +
          `queue ${fmt(kernelSeen.kernel.serverSendQ)} B (from /proc/net/tcp).`
        : ''),
  );

  return {
    normal,
    p1,
    p2,
    single,
    repeated,
    repeatedOwn,
    readerCost,
    splitRows,
    singleEp,
    repeatedEp,
    verdicts,
  };
}

type SlowFigures = ReturnType<typeof slowFigures>;

/** The report's Markdown section. */
function slowMarkdown(rec: SlowRun, f: SlowFigures): string {
  const { rss, idleMiB, warm } = rec;
  const { p1, p2, single, repeated, repeatedOwn, splitRows, singleEp, repeatedEp, verdicts } = f;
  const episodeRows = (eps: readonly SlowEpisode[]): string[][] =>
    eps.map((e) => [
      String(e.index),
      fmt(e.openedAtS),
      fmt(e.floodMs / 1000),
      fmt(e.sent),
      fmt(e.bytesSent / MIB),
      e.stoppedBy === 'server'
        ? `server (seen in its ${e.detectedVia === 'log' ? 'log' : '/metrics'})`
        : e.stoppedBy,
      e.closeCode === undefined
        ? e.endedByClient
          ? `none (client ${e.endedByClient}d it)`
          : '–'
        : String(e.closeCode),
      Object.entries(e.warnings)
        .map(([k, v]) => `${k}: ${v}`)
        .join(', ') || '0',
      fmt(e.answersRead),
      fmt(e.bytesRead / MIB),
      e.kernel
        ? `${fmt(Math.round(e.kernel.clientRecvQ / 1024))} / ${e.kernel.serverSendQ === undefined ? '–' : fmt(Math.round(e.kernel.serverSendQ / 1024))}`
        : '–',
    ]);
  const episodeHeaders = [
    '#',
    'opened s',
    'flooded s',
    'sent',
    'MiB sent',
    'stopped by',
    'close code',
    'warnings read',
    'answers read',
    'MiB read',
    'kernel: client recv-Q / server send-Q KiB',
  ];
  const episodeAlign: ('left' | 'right')[] = [
    'right',
    'right',
    'right',
    'right',
    'right',
    'left',
    'right',
    'left',
    'right',
    'right',
    'right',
  ];
  const md: string[] = [
    '### Slow clients',
    '',
    'Each slow client floods until the server closes it — seen in the server’s log (its "slow consumer closed ' +
      `(1013)" line, checked every ${POLL_MS} ms) or in /metrics (\`streaminfer_slow_consumer_closes_total\`, ` +
      `checked every ${METRICS_EVERY_MS / 1000} s only: each scrape costs the server memory for a while) — then ` +
      'resumes reading to collect what was waiting and the close frame. Rate limit: ' +
      `STREAMINFER_RATE_LIMIT_RPS=${RATE_LIMIT_RPS} (burst ${RATE_LIMIT_RPS}), above the slow client's ${SLOW_RATE} ` +
      'req/s so the flood is not refused; slow-consumer limits at their defaults (warn past 1 MiB, close past ' +
      '8 MiB of unsent answers).',
    '',
    `**Phase 1 — one slow client** (${fmt(p1?.startS)}–${fmt(p1?.endS)} s; the issue’s setup):`,
    '',
    markdownTable(episodeHeaders, episodeRows(singleEp), episodeAlign),
    '',
    `**Phase 2 — stress: a new slow client each time one is closed** (${fmt(p2?.startS)}–${fmt(p2?.endS)} s):`,
    '',
    markdownTable(episodeHeaders, episodeRows(repeatedEp), episodeAlign),
    '',
    '### Server memory',
    '',
    markdownTable(
      ['RSS (server process tree)', 'MiB'],
      [
        ['idle, before any client', fmt(idleMiB)],
        ['normal clients running, before the reading warm-up client', fmt(warm.rssBeforeMiB)],
        [`after the reading warm-up client (${WARM_SECONDS} s of the same traffic)`, fmt(warm.rssAfterMiB)],
        ['**phase 1: when the slow client started** (the reference)', fmt(single.startMiB)],
        [`phase 1: peak (at ${fmt(single.peakAtS)} s)`, fmt(single.peakMiB)],
        ['phase 1: at its end', fmt(single.endMiB)],
        [
          '**phase 1 growth: peak − reference**',
          single.growthMiB === undefined ? '–' : single.growthMiB.toFixed(1),
        ],
        [`phase 2: peak (at ${fmt(repeated.peakAtS)} s)`, fmt(repeated.peakMiB)],
        ['at the end (3 s after the flood)', fmt(rss.at(-1)?.mib)],
        [
          '**phase 2 growth: peak − phase 1 reference**',
          repeated.growthMiB === undefined ? '–' : repeated.growthMiB.toFixed(1),
        ],
        [
          'phase 2 growth within the phase',
          repeatedOwn.growthMiB === undefined ? '–' : repeatedOwn.growthMiB.toFixed(1),
        ],
        ...splitRows('phase 1', single),
        ...splitRows('phase 2', repeated),
      ],
      ['left', 'right'],
    ),
    '',
    'RSS is the sum of VmRSS over the server process and its descendants (supervisor, node), sampled every second. ' +
      `Before the flood, a client that reads its answers sends the same requests (${SLOW_TEXT_BYTES}-byte echo ` +
      `texts at ${SLOW_RATE} req/s) for ${WARM_SECONDS} s: serving that traffic at all costs the server memory once ` +
      '(pages of its request and response rings touched for the first time, the JS heap sized to the allocation ' +
      'rate), whoever reads; the growth judged is from the start of the flood, i.e. what the slow clients add. ' +
      'Growth over idle is in the verdicts’ details.',
    '',
    '### Done-when',
    '',
    verdictTable(verdicts),
  ];

  return md.join('\n');
}

/** Charts: server RSS over time with the phases marked, and the normal clients' answers. */
function slowCharts(rec: SlowRun, f: SlowFigures): Chart[] {
  const { rss, warm, episodes, floodEndS } = rec;
  const { normal, p1, p2, single } = f;
  const charts: Chart[] = [];
  if (rss.length) {
    const markers = [
      ...(warm.startS !== undefined ? [{ x: warm.startS, label: 'reading client' }] : []),
      ...(p1 ? [{ x: p1.startS, label: 'phase 1' }] : []),
      ...(p2 ? [{ x: p2.startS, label: 'phase 2' }] : []),
      ...episodes
        .filter((e) => e.stoppedBy === 'server' && e.phase === 'single')
        .map((e) => ({ x: e.stoppedAtS, label: String(e.closeCode ?? '?') })),
      ...(floodEndS !== undefined ? [{ x: floodEndS, label: 'end' }] : []),
    ];
    const ref = single.startMiB;
    charts.push({
      file: 'slow-consumer-rss.svg',
      title: 'slow-consumer: server RSS over time',
      svg: lineChart({
        title: `server RSS (MiB): one slow client, then replaced slow clients; bound: reference + ${SLOW_TARGETS.rssGrowthMiB} MiB`,
        xLabel: 'seconds since the normal clients started',
        yLabel: 'MiB',
        series: [
          {
            name: 'server RSS',
            color: PALETTE[0]!,
            points: rss.map((x): [number, number] => [x.t, x.mib]),
          },
          ...(ref !== undefined
            ? [
                {
                  name: `reference + ${SLOW_TARGETS.rssGrowthMiB} MiB`,
                  color: PALETTE[2]!,
                  points: [
                    [rss[0]!.t, ref + SLOW_TARGETS.rssGrowthMiB],
                    [rss.at(-1)!.t, ref + SLOW_TARGETS.rssGrowthMiB],
                  ] as [number, number][],
                },
              ]
            : []),
        ],
        markers,
      }),
    });
  }
  if (normal?.load) {
    charts.push(
      timelineChart(
        'slow-consumer-normal.svg',
        'slow-consumer: normal clients’ answers per second',
        normal.load,
      ),
    );
  }

  return charts;
}

/** The scenario's result. */
function slowReport(ctx: ScenarioContext, setup: SlowSetup, rec: SlowRun): ScenarioResult {
  const { floodSeconds, size, env } = setup;
  const { runs, notes, idleMiB, warm, phases, rss, episodes } = rec;
  const f = slowFigures(ctx, rec);
  const { single, repeated, repeatedOwn, verdicts } = f;
  const markdown = slowMarkdown(rec, f);
  const charts = slowCharts(rec, f);
  return {
    params: {
      phaseSeconds: floodSeconds,
      slowClient: `echo with a ${SLOW_TEXT_BYTES}-byte text at ${SLOW_RATE} req/s, never reading`,
      normalClients: `${size.connections} conns × ${NORMAL_RATE} req/s (open loop, echo-floats)`,
      env,
      server: 'serve --nodes 1 --workers 1 --models-dir <dir with only echo> --model echo',
    },
    runs,
    ratios: [],
    charts,
    notes,
    markdown,
    data: {
      targets: SLOW_TARGETS,
      rssMiB: { idle: idleMiB, single, repeated, repeatedWithinPhase: repeatedOwn },
      readingWarmUp: { seconds: WARM_SECONDS, ...warm },
      phases,
      rssSamples: rss,
      episodes,
      verdicts,
    },
  };
}

export const slowConsumer: Scenario = {
  name: 'slow-consumer',
  description:
    `Slow consumer: one WebSocket client that never reads, sending echo requests with a ${SLOW_TEXT_BYTES / 1024} KiB text ` +
    `at ${SLOW_RATE} req/s (so ~${SLOW_TEXT_BYTES / 1024} KiB answers pile up), alongside 10 normal clients at ` +
    `${NORMAL_RATE} req/s each, for 60 s (15 s with --quick); then, as a stress beyond the issue, 60 s more in which ` +
    'each slow client the server closes is replaced at once. ' +
    `Server RSS growth < ${SLOW_TARGETS.rssGrowthMiB} MiB, the slow client closed with 1013, normal clients: zero errors.`,
  async run(ctx) {
    const setup = slowSetup(ctx);
    const modelsDir = modelsDirWith(ctx.repoRoot, ['echo'], 'streaminfer-slow-');
    const rec: SlowRun = { runs: [], episodes: [], rss: [], notes: [], warm: {}, phases: [] };
    try {
      ctx.log('slow-consumer: starting server');
      const session = await withServer(
        () =>
          ctx.startStreamInfer({
            label: 'slow-consumer',
            nodes: 1,
            workers: 1,
            args: ['--models-dir', modelsDir, '--model', 'echo'],
            env: setup.env,
          }),
        (server) => driveSlowConsumer(ctx, setup, server, rec),
      );
      stampSharedServer(rec.runs, session, setup.env, 'normal');
    } finally {
      fs.rmSync(modelsDir, { recursive: true, force: true });
    }
    return slowReport(ctx, setup, rec);
  },
};
