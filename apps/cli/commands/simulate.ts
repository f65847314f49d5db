/**
 * `streaminfer simulate`: publishes the reference delivery workload to JetStream in real time.
 *
 * Each record goes to `<eventsPrefix>.<delivery_id>` with `Msg-Id = event_id` (a duplicate reuses it, so
 * the broker dedupes it inside its window and says so in the PubAck). PubAcks are awaited with bounded
 * concurrency: a slow broker holds the pacer back (it catches up later, never skips) instead of growing an
 * unbounded queue of pending publishes.
 *
 * Scaling: `--deliveries` is honoured when given (GPS interval = deliveries / rate). Without it, the run uses
 * ⌈rate × 4 s⌉ deliveries so each driver reports GPS about every 4 s, as real fleet apps do: a higher rate
 * means more deliveries, not faster GPS. The generator is incremental (memory ≈ 3 KB per delivery in flight
 * plus the records not yet due), so 3,000–6,000 events/s run live with bounded memory. `--ramp-s` is the
 * span over which the deliveries start (default min(duration, 300 s), the historical ramp); a bench wants a
 * few seconds to reach its rate at once.
 */
import type { Command } from 'commander';
import {
  DEFAULT_RAMP_MS,
  deliveriesForRate,
  gpsIntervalForRate,
  liveOptions,
  newGauges,
  paced,
  type SimRecord,
  simulationRecords,
} from '../../../libs/delivery';
import { type NatsAuth, NatsAuthError } from '../../../libs/nats-auth';
import {
  brokerPlacesEvents,
  connectNats,
  DEFAULT_DUPLICATE_WINDOW_MS,
  DEFAULT_NATS_URL,
  eventSubject,
  inputStreamSpec,
  JetStreamSink,
  keySubject,
  PipelineIoError,
  provisionStreams,
  streamLayout,
} from '../../pipeline';
import { addNatsOptions, loadCommandNats, type NatsFlags } from '../nats-options';
import { SimulateOptionError } from './errors';

export interface SimulateConfig {
  /** The server list (--nats). */
  nats: string;
  /** The NATS settings loaded (identity, TLS; libs/nats-auth); without them `nats` is connected to as it is. */
  auth?: NatsAuth;
  rate: number;
  /** Concurrent deliveries: --deliveries, or deliveriesForRate(rate) when not given. */
  deliveries: number;
  /** Whether deliveries came from the rate (no --deliveries). */
  deliveriesFromRate: boolean;
  durationMs: number;
  /** Deliveries start within this span (--ramp-s; default min(duration, 300 s)). */
  rampMs: number;
  /** Event times spread over the second instead of whole seconds (--sub-second). */
  subSecondTimes: boolean;
  disorderMs: number;
  duplicateFraction: number;
  tooLateFraction: number;
  tooLateDelayMs: number;
  invalidFraction: number;
  seed: number;
  subjectRoot: string;
  eventsStream: string;
  /** Key partitions of the pipeline (the subject's partition token): must match its config. */
  partitions: number;
  duplicateWindowMs: number;
  /** Replicas of the events stream when this run creates it (--replicas; the pipeline's `replicas`). */
  replicas: number;
  maxInflight: number;
  progressMs: number;
  json: boolean;
}

export interface SimulateSummary {
  /** Records the broker acknowledged (every kind). */
  sent: number;
  /** Of those: ordinary events, duplicates (re-sent Msg-Id), too-late events, invalid payloads. */
  events: number;
  duplicates: number;
  too_late: number;
  invalid: number;
  /** PubAcks that said the Msg-Id was already stored: the broker's own dedupe. */
  broker_duplicates: number;
  /** Messages the stream gained: sent − broker_duplicates. */
  stored: number;
  /** Records given up on after every publish attempt failed. */
  failed: number;
  /** Deliveries with at least one record published, and how many of them end late (ground truth). */
  deliveries: number;
  deliveries_late: number;
  /** Deliveries whose `delivered` status was published within the run. */
  deliveries_delivered: number;
  elapsed_s: number;
  rate_target: number;
  rate_actual: number;
  /** Concurrent deliveries (slots), each one's GPS interval, and the start ramp. */
  concurrent_deliveries: number;
  gps_interval_ms: number;
  ramp_s: number;
  /** Publish → PubAck latency of the acknowledged records, ms (±2 %; null when none was acknowledged). */
  puback_ms: { p50: number; p95: number; p99: number; max: number } | null;
  /** Most records the generator held at once (generated, not yet due): its memory bound in records. */
  generator_max_pending: number;
  seed: number;
  stream: string;
  subject_prefix: string;
  /**
   * Who placed events in partitions: 'broker' (nats-server 2.10+: published to `<prefix>.<delivery_id>`,
   * stored by the stream's partition transform) or 'producer' (2.9: published to `<prefix>.<k>.<delivery_id>`).
   */
  placement: 'broker' | 'producer';
  /** What ended the run. */
  stopped: 'duration' | 'SIGINT' | 'SIGTERM';
}

type Flags = Record<string, string | boolean | undefined>;

function numberFlag(flags: Flags, key: string, flag: string, fallback?: number): number {
  const raw = flags[key];
  if (raw === undefined) {
    if (fallback === undefined) throw new SimulateOptionError(`${flag} is required`);
    return fallback;
  }
  const value = typeof raw === 'string' && raw.trim() !== '' ? Number(raw) : Number.NaN;
  if (!Number.isFinite(value)) throw new SimulateOptionError(`${flag} must be a number (got ${String(raw)})`);
  return value;
}

function check(ok: boolean, flag: string, rule: string, value: number): void {
  if (!ok) throw new SimulateOptionError(`${flag} must be ${rule} (got ${value})`);
}

/** Flags (commander's strings) → a checked config; every error names its flag. */
export function parseSimulateFlags(flags: Flags): SimulateConfig {
  const rate = numberFlag(flags, 'rate', '--rate');
  check(rate > 0, '--rate', 'a number > 0 (events/s)', rate);
  const deliveriesFromRate = flags['deliveries'] === undefined;
  const deliveries = deliveriesFromRate
    ? deliveriesForRate(rate)
    : numberFlag(flags, 'deliveries', '--deliveries');
  check(Number.isInteger(deliveries) && deliveries >= 1, '--deliveries', 'an integer >= 1', deliveries);
  // The generator drives in 1-second ticks: a delivery emits at most one GPS event per second.
  if (rate > deliveries) {
    throw new SimulateOptionError(
      `--rate ${rate} needs --deliveries >= ${Math.ceil(rate)}: each delivery sends at most one GPS event per second (got --deliveries ${deliveries})`,
    );
  }
  const duration = numberFlag(flags, 'duration', '--duration');
  check(duration > 0, '--duration', 'a number of seconds > 0', duration);
  const ramp = numberFlag(flags, 'rampS', '--ramp-s', Math.min(duration, DEFAULT_RAMP_MS / 1000));
  check(ramp >= 0, '--ramp-s', 'a number of seconds >= 0', ramp);
  const disorder = numberFlag(flags, 'disorderS', '--disorder-s', 0);
  check(disorder >= 0, '--disorder-s', 'a number of seconds >= 0', disorder);
  const fraction = (key: string, flag: string): number => {
    const value = numberFlag(flags, key, flag, 0);
    check(value >= 0 && value < 1, flag, 'a fraction in [0, 1)', value);
    return value;
  };
  const duplicateFraction = fraction('duplicates', '--duplicates');
  const tooLateFraction = fraction('tooLate', '--too-late');
  const invalidFraction = fraction('invalid', '--invalid');
  const tooLateDelay = numberFlag(flags, 'tooLateDelayS', '--too-late-delay-s', 300);
  check(tooLateDelay >= 0, '--too-late-delay-s', 'a number of seconds >= 0', tooLateDelay);
  const seed = numberFlag(flags, 'seed', '--seed', 1);
  check(Number.isSafeInteger(seed), '--seed', 'an integer', seed);
  const maxInflight = numberFlag(flags, 'maxInflight', '--max-inflight', 256);
  check(Number.isInteger(maxInflight) && maxInflight >= 1, '--max-inflight', 'an integer >= 1', maxInflight);
  const progress = numberFlag(flags, 'progressS', '--progress-s', 1);
  check(progress >= 0, '--progress-s', 'a number of seconds >= 0 (0 = no progress lines)', progress);
  const window = numberFlag(
    flags,
    'duplicateWindowS',
    '--duplicate-window-s',
    DEFAULT_DUPLICATE_WINDOW_MS / 1000,
  );
  check(Number.isInteger(window) && window >= 1, '--duplicate-window-s', 'an integer >= 1', window);
  const partitions = numberFlag(flags, 'partitions', '--partitions', 4);
  check(
    Number.isInteger(partitions) && partitions >= 1 && partitions <= 1024,
    '--partitions',
    'an integer in 1..1024',
    partitions,
  );
  const replicas = numberFlag(flags, 'replicas', '--replicas', 1);
  check(
    Number.isInteger(replicas) && replicas >= 1 && replicas <= 5,
    '--replicas',
    'an integer in 1..5',
    replicas,
  );
  const config: SimulateConfig = {
    nats: typeof flags['nats'] === 'string' ? flags['nats'] : DEFAULT_NATS_URL,
    rate,
    deliveries,
    deliveriesFromRate,
    durationMs: Math.round(duration * 1000),
    rampMs: Math.round(ramp * 1000),
    subSecondTimes: flags['subSecond'] === true,
    disorderMs: Math.round(disorder * 1000),
    duplicateFraction,
    tooLateFraction,
    tooLateDelayMs: Math.round(tooLateDelay * 1000),
    invalidFraction,
    seed,
    subjectRoot: typeof flags['subjectRoot'] === 'string' ? flags['subjectRoot'] : '',
    eventsStream: typeof flags['eventsStream'] === 'string' ? flags['eventsStream'] : 'DELIVERY_EVENTS',
    partitions,
    duplicateWindowMs: window * 1000,
    replicas,
    maxInflight,
    progressMs: Math.round(progress * 1000),
    json: flags['json'] === true,
  };
  // The layout checks the subject root and stream name; report those by their flags too.
  try {
    streamLayout({ subjectRoot: config.subjectRoot, eventsStream: config.eventsStream });
  } catch (err) {
    const message = (err as Error).message;
    const flag = message.startsWith('subjectRoot') ? '--subject-root' : '--events-stream';
    throw new SimulateOptionError(`${flag}: ${message}`);
  }
  return config;
}

/**
 * Starts `publish` for each item in order, with at most `maxInflight` unresolved at once: when the bound is
 * reached the loop (and so the pacer feeding it) waits for one to settle. Resolves once all have settled.
 * `publish` must not reject (failures are its own to count).
 */
export async function publishBounded<T>(
  items: AsyncIterable<T>,
  publish: (item: T) => Promise<void>,
  maxInflight: number,
  stopped: () => boolean,
  inflight: Set<Promise<void>> = new Set(),
): Promise<void> {
  for await (const item of items) {
    if (stopped()) break;
    while (inflight.size >= maxInflight) await Promise.race(inflight);
    const p = publish(item).finally(() => inflight.delete(p));
    inflight.add(p);
  }
  await Promise.all(inflight);
}

export interface SimulateHooks {
  /** A progress line (the CLI writes it to stderr, so stdout holds only the summary). */
  progress?: (line: string) => void;
  /** Resolves when the run should stop early (a signal); its value is reported as `stopped`. */
  stop?: Promise<'SIGINT' | 'SIGTERM'>;
}

/** Runs the simulation to its end (duration or stop) and returns the summary; throws PipelineIoError on I/O. */
export async function runSimulate(
  config: SimulateConfig,
  hooks: SimulateHooks = {},
): Promise<SimulateSummary> {
  const layout = streamLayout({
    subjectRoot: config.subjectRoot,
    eventsStream: config.eventsStream,
    duplicateWindowMs: config.duplicateWindowMs,
  });
  const nats = await connectNats({
    ...(config.auth ? { auth: config.auth } : { servers: config.nats }),
    name: 'streaminfer-simulate',
    replicas: config.replicas,
    onProblem: (message) => hooks.progress?.(`simulate: ${message}`),
  });
  try {
    // The producer contract (docs/producers.md): the delivery subject where the broker places events.
    const places = brokerPlacesEvents(nats.nc.info?.version);
    await provisionStreams(nats.jsm, [inputStreamSpec(layout, config.partitions, places)], nats.replicas);
    const prefix = layout.subjects.eventsPrefix;
    const subjectOf = places
      ? (id: string) => keySubject(prefix, id)
      : (id: string) => eventSubject(prefix, id, config.partitions);
    // A producer outlasts a broker busy for a while (a consumer catching up floods it with its own
    // publishes): up to 8 attempts, 5 s each, with backoff, under the same Msg-Id (a copy that landed is dropped).
    const sink = new JetStreamSink(nats.js, { maxAttempts: 8 });
    const startMs = Date.now();
    const endMs = startMs + config.durationMs;
    const summary: SimulateSummary = {
      sent: 0,
      events: 0,
      duplicates: 0,
      too_late: 0,
      invalid: 0,
      broker_duplicates: 0,
      stored: 0,
      failed: 0,
      deliveries: 0,
      deliveries_late: 0,
      deliveries_delivered: 0,
      elapsed_s: 0,
      rate_target: config.rate,
      rate_actual: 0,
      concurrent_deliveries: config.deliveries,
      gps_interval_ms: gpsIntervalForRate(config.rate, config.deliveries),
      ramp_s: config.rampMs / 1000,
      puback_ms: null,
      generator_max_pending: 0,
      seed: config.seed,
      stream: layout.events.name,
      subject_prefix: layout.subjects.eventsPrefix,
      placement: places ? 'broker' : 'producer',
      stopped: 'duration',
    };

    // Truth of deliveries generated but not yet published (a delivery counts once its first record is sent).
    const unstarted = new Map<string, boolean>();
    const gauges = newGauges();
    const records = simulationRecords(
      liveOptions(
        {
          rate: config.rate,
          deliveries: config.deliveries,
          durationMs: config.durationMs,
          rampMs: config.rampMs,
          subSecondTimes: config.subSecondTimes,
          disorderMs: config.disorderMs,
          duplicateFraction: config.duplicateFraction,
          tooLateFraction: config.tooLateFraction,
          tooLateDelayMs: config.tooLateDelayMs,
          invalidFraction: config.invalidFraction,
          seed: config.seed,
        },
        startMs,
      ),
      (plan) => unstarted.set(plan.delivery_id, plan.late),
      gauges,
    );
    // Records come in publish order: the first one past the end ends the run (deliveries still driving are
    // cut off, as a producer that stops would).
    function* untilEnd(): Generator<SimRecord> {
      for (const r of records) {
        if (r.publishAtMs >= endMs) return;
        yield r;
      }
    }

    let stopped: 'SIGINT' | 'SIGTERM' | null = null;
    let wake: (() => void) | null = null;
    hooks.stop?.then((signal) => {
      stopped = signal;
      wake?.();
    });
    const sleep = (ms: number) =>
      new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, ms);
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });

    const inflight = new Set<Promise<void>>();
    const ackLatency = new LogHistogram();
    const publishOne = async (r: SimRecord): Promise<void> => {
      const late = unstarted.get(r.delivery_id);
      if (late !== undefined) {
        unstarted.delete(r.delivery_id);
        summary.deliveries++;
        if (late) summary.deliveries_late++;
      }
      try {
        const sentAt = performance.now();
        const ack = await sink.publish({
          subject: subjectOf(r.delivery_id),
          data: r.payload,
          msgId: r.msgId,
        });
        ackLatency.record(performance.now() - sentAt);
        summary.sent++;
        if (ack.duplicate) summary.broker_duplicates++;
        if (r.kind === 'event') summary.events++;
        else if (r.kind === 'duplicate') summary.duplicates++;
        else if (r.kind === 'too_late') summary.too_late++;
        else summary.invalid++;
        if (r.kind !== 'duplicate' && r.event?.type === 'status' && r.event.status === 'delivered')
          summary.deliveries_delivered++;
      } catch {
        summary.failed++;
      }
    };

    let last = { at: startMs, sent: 0 };
    const progressLine = (now: number) => {
      const dt = (now - last.at) / 1000;
      const rate = dt > 0 ? (summary.sent - last.sent) / dt : 0;
      last = { at: now, sent: summary.sent };
      hooks.progress?.(
        `simulate t=${((now - startMs) / 1000).toFixed(1)}s ${rate.toFixed(0)} events/s  sent ${summary.sent}` +
          `  duplicates ${summary.duplicates} (broker ${summary.broker_duplicates})  too-late ${summary.too_late}` +
          `  invalid ${summary.invalid}  failed ${summary.failed}  deliveries ${summary.deliveries}  in flight ${inflight.size}` +
          `  generator holds ${gauges.pending} records`,
      );
    };
    const ticker =
      config.progressMs > 0 && hooks.progress
        ? setInterval(() => progressLine(Date.now()), config.progressMs)
        : null;

    try {
      const due = async function* () {
        for await (const { record } of paced(untilEnd(), { now: Date.now, sleep })) yield record;
      };
      await publishBounded(due(), publishOne, config.maxInflight, () => stopped !== null, inflight);
      // The records end at the last one due before the end; the run still lasts its duration (a quiet
      // tail is part of the workload, and rate_actual is over the whole span).
      const rest = endMs - Date.now();
      if (stopped === null && rest > 0) await sleep(rest);
    } finally {
      if (ticker) clearInterval(ticker);
    }
    const elapsedMs = Date.now() - startMs;
    summary.stopped = stopped ?? 'duration';
    summary.stored = summary.sent - summary.broker_duplicates;
    summary.elapsed_s = Math.round(elapsedMs) / 1000;
    summary.rate_actual = elapsedMs > 0 ? Math.round((summary.sent / elapsedMs) * 1000 * 10) / 10 : 0;
    summary.puback_ms = ackLatency.count > 0 ? ackLatency.summary() : null;
    summary.generator_max_pending = gauges.maxPending;
    return summary;
  } finally {
    await nats.close().catch(() => undefined);
  }
}

/**
 * A latency histogram in constant memory: log buckets 2 % wide from 1 µs, so a long run's percentiles
 * cost a few KB (values are reported as their bucket's upper bound, within 2 %).
 */
export class LogHistogram {
  private static readonly BASE = 1.02;
  private static readonly MIN_MS = 0.001;
  private readonly buckets: number[] = [];
  count = 0;
  private max = 0;

  record(ms: number): void {
    const v = Math.max(ms, LogHistogram.MIN_MS);
    const i = Math.ceil(Math.log(v / LogHistogram.MIN_MS) / Math.log(LogHistogram.BASE));
    this.buckets[i] = (this.buckets[i] ?? 0) + 1;
    this.count++;
    this.max = Math.max(this.max, ms);
  }

  /** The smallest bucket bound with at least q of the values at or below it (0 < q ≤ 1). */
  quantile(q: number): number {
    const want = Math.ceil(q * this.count);
    let seen = 0;
    for (let i = 0; i < this.buckets.length; i++) {
      seen += this.buckets[i] ?? 0;
      if (seen >= want && seen > 0) return Math.min(this.max, LogHistogram.MIN_MS * LogHistogram.BASE ** i);
    }
    return this.max;
  }

  summary(): { p50: number; p95: number; p99: number; max: number } {
    const r = (x: number) => Math.round(x * 100) / 100;
    return {
      p50: r(this.quantile(0.5)),
      p95: r(this.quantile(0.95)),
      p99: r(this.quantile(0.99)),
      max: r(this.max),
    };
  }
}

export function formatSummary(s: SimulateSummary): string {
  return [
    `simulate: ${s.stopped === 'duration' ? 'done' : `stopped by ${s.stopped}`} after ${s.elapsed_s} s` +
      ` on ${s.subject_prefix}.${s.placement === 'broker' ? '' : '<partition>.'}<delivery_id>` +
      ` (stream ${s.stream}, seed ${s.seed})`,
    `  sent ${s.sent} at ${s.rate_actual} events/s (target ${s.rate_target}): ${s.events} events,` +
      ` ${s.duplicates} duplicates, ${s.too_late} too late, ${s.invalid} invalid`,
    `  broker duplicates ${s.broker_duplicates} (stored ${s.stored}), failed ${s.failed}`,
    `  deliveries ${s.deliveries} (${s.deliveries_late} end late — ground truth; ${s.deliveries_delivered} delivered within the run)`,
    `  ${s.concurrent_deliveries} concurrent deliveries, GPS every ${s.gps_interval_ms} ms, started over ${s.ramp_s} s;` +
      ` PubAck ms ${s.puback_ms ? `p50 ${s.puback_ms.p50} p95 ${s.puback_ms.p95} p99 ${s.puback_ms.p99} max ${s.puback_ms.max}` : 'n/a'}`,
  ].join('\n');
}

/** A one-line reason for an I/O failure, for the CLI's stderr. */
export function describeSimulateError(err: unknown): string {
  if (err instanceof PipelineIoError) return `${err.message} [${err.code}]`;
  return String(err);
}

/** Declares `simulate` on the CLI. Bad flags exit 2 (via `fail`); an I/O failure exits 1; a signal stops it cleanly. */
export function registerSimulate(program: Command, fail: (message: string) => never): void {
  addNatsOptions(program.command('simulate'))
    .description('publish the reference delivery workload (GPS, status, traffic events) to NATS JetStream')
    .option('--rate <events/s>', 'target events per second (GPS interval = deliveries / rate)')
    .option(
      '--deliveries <n>',
      'concurrent deliveries (default ⌈rate × 4⌉: GPS about every 4 s, more deliveries at a higher rate)',
    )
    .option('--duration <s>', 'seconds to publish for')
    .option(
      '--ramp-s <s>',
      'deliveries start over this many seconds (default min(duration, 300)); a few seconds reach the rate at once',
    )
    .option(
      '--sub-second',
      'event times with milliseconds, spread over the second (smooth publishing at high rates)',
    )
    .option('--disorder-s <s>', 'events arrive out of order by up to this many seconds', '0')
    .option('--duplicates <f>', 'fraction of events published twice (same Msg-Id)', '0')
    .option('--too-late <f>', 'fraction of events published beyond the allowed lateness', '0')
    .option('--too-late-delay-s <s>', 'how late a too-late event arrives', '300')
    .option('--invalid <f>', 'fraction of GPS events replaced by a malformed payload', '0')
    .option('--seed <n>', 'simulator seed (same seed, same workload shape)', '1')
    .option('--nats <url>', 'NATS server(s), nats:// or tls://', DEFAULT_NATS_URL)
    .option(
      '--subject-root <tokens>',
      'prefix of the subjects (<root>.delivery.events.<partition>.<delivery_id>)',
    )
    .option('--partitions <n>', "the pipeline's key partitions (its config `partitions`)", '4')
    .option('--events-stream <name>', 'input stream, created when missing', 'DELIVERY_EVENTS')
    .option(
      '--duplicate-window-s <s>',
      "the created stream's Msg-Id dedupe window",
      String(DEFAULT_DUPLICATE_WINDOW_MS / 1000),
    )
    .option(
      '--replicas <n>',
      "the created stream's replicas (the pipeline's `replicas`; 3 on a cluster)",
      '1',
    )
    .option('--max-inflight <n>', 'publishes awaiting their PubAck at once (backpressure bound)', '256')
    .option('--progress-s <s>', 'seconds between progress lines on stderr (0 = none)', '1')
    .option('--json', 'print the summary as JSON')
    .action(async (flags: Flags) => {
      let config: SimulateConfig;
      try {
        config = parseSimulateFlags(flags);
        config.auth = loadCommandNats(config.nats, '--nats', flags as NatsFlags);
      } catch (err) {
        if (err instanceof SimulateOptionError || err instanceof NatsAuthError)
          fail(`simulate: ${err.message}`);
        throw err;
      }
      let onSignal: (signal: 'SIGINT' | 'SIGTERM') => void = () => undefined;
      const stop = new Promise<'SIGINT' | 'SIGTERM'>((resolve) => {
        onSignal = resolve;
      });
      const handlers = {
        SIGINT: () => onSignal('SIGINT'),
        SIGTERM: () => onSignal('SIGTERM'),
      };
      process.once('SIGINT', handlers.SIGINT);
      process.once('SIGTERM', handlers.SIGTERM);
      try {
        const summary = await runSimulate(config, {
          stop,
          progress: (line) => process.stderr.write(`${line}\n`),
        });
        console.log(config.json ? JSON.stringify(summary) : formatSummary(summary));
        if (summary.failed > 0) {
          console.error(
            `streaminfer: simulate: ${summary.failed} records were not acknowledged by the broker`,
          );
          process.exitCode = 1;
        }
      } catch (err) {
        console.error(`streaminfer: simulate: ${describeSimulateError(err)}`);
        // NATS refused the credentials or TLS settings: a setting to fix (2), like a bad flag.
        process.exitCode = err instanceof PipelineIoError && err.code === 'nats_refused' ? 2 : 1;
      } finally {
        process.off('SIGINT', handlers.SIGINT);
        process.off('SIGTERM', handlers.SIGTERM);
      }
    });
}
