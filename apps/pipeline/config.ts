/**
 * The pipeline config file (`streaminfer pipeline --config pipeline.json`; the shipped one is
 * deploy/pipeline.json). Every field has a default; the file overrides them and flags override the file.
 * Unknown keys and bad values are refused up front with the path of the culprit, before any I/O.
 */

import { MAX_REPLICAS, redactNatsUrls } from '../../libs/nats-auth';
import { PipelineConfigError } from './errors';

/**
 * The pipeline's NATS (libs/nats-auth's option set; files are read when the pipeline starts). A password or
 * token only through STREAMINFER_NATS_PASSWORD / STREAMINFER_NATS_TOKEN or a file, never in this config.
 */
export interface PipelineNats {
  /** nats:// or tls:// URLs, comma-separated (userinfo accepted, and redacted wherever printed). */
  servers: string;
  user?: string;
  passwordFile?: string;
  tokenFile?: string;
  nkeyFile?: string;
  creds?: string;
  tls?: { ca?: string; cert?: string; key?: string; handshakeFirst?: boolean };
}

export interface PipelineConfig {
  /** `"nats://…"` in a file is short for `{ "servers": "nats://…" }`. */
  nats: PipelineNats;
  /**
   * Copies JetStream keeps of each stream, KV bucket and object store the pipeline creates (1 on a single
   * server, 3 on a 3-node cluster); checked against the server at connect. Existing ones need as many.
   */
  replicas: number;
  /** Prepended to every subject (tenants, tests). */
  subjectRoot: string;
  streams: { events: string; predictions: string; side: string; duplicateWindowMs: number };
  consumer: {
    durable: string;
    /** The backpressure bound: the broker stops delivering while this many messages await an ack. */
    maxAckPending: number;
    ackWaitMs: number;
    maxDeliver: number;
    batchSize: number;
  };
  /** Messages between receipt and ack at once, per partition (≤ maxAckPending). */
  concurrency: number;
  /**
   * Key partitions: producers publish to `<events>.<delivery_id>` (nats-server 2.10+ places it) or
   * `<events>.<partition>.<delivery_id>` (partition = FNV-1a of the delivery id's UTF-8 bytes mod this count;
   * docs/producers.md); each partition has its own consumer (`<durable>-p<k>`), state, watermark
   * and checkpoints, and is worked by one instance at a time. Fixed for a stream's life: changing it moves keys.
   */
  partitions: number;
  /**
   * This instance among several sharing the partitions: its id (default: host name and pid) and the leases
   * in a KV bucket (`<durable>.p.<k>`, renewed every leaseTtlMs/3) that give each partition one owner.
   * Renewals run on a thread of their own; they stop once the main thread has been stalled for maxStallMs
   * (> leaseTtlMs), so a wedged process loses its partitions but a long restore or snapshot does not.
   */
  instance: { id: string; leaseBucket: string; leaseTtlMs: number; maxStallMs: number };
  eventTime: {
    outOfOrdernessMs: number;
    allowedLatenessMs: number;
    idleTimeoutMs: number;
    stateTtlMs: number;
    dedupeTtlMs: number;
    /**
     * Admission bounds against the broker's store time of each event: stamped more than maxClockSkewMs after
     * it (a producer clock ahead, a year 9999) or more than maxEventAgeMs before it (epoch seconds read as ms),
     * the event is dead-lettered instead of moving its partition's watermark.
     */
    maxClockSkewMs: number;
    maxEventAgeMs: number;
  };
  model: { name: string; version: string };
  alertThreshold: number;
  /**
   * Largest event payload accepted (bytes); a bigger one is dead-lettered unparsed (`payload: …`). Extra
   * fields are ignored and not kept in state, so this bounds only the parse: 512 B to 8 MiB.
   */
  maxEventBytes: number;
  inference: {
    mode: 'embedded' | 'external';
    /** embedded: the model repository and its worker pool. */
    modelsDir: string;
    workers: number;
    device: string;
    /** external: a StreamInfer server's WebSocket endpoint. */
    url: string;
    connections: number;
    maxInflight: number;
  };
  /**
   * The admin endpoint (libs/admin's listener): host and port, or a unix socket (mode 0600) instead; the
   * token's file (else STREAMINFER_ADMIN_TOKEN; required off loopback); TLS certificate and key (PEM files).
   * '' = unset.
   */
  admin: {
    host: string;
    port: number;
    socket: string;
    tokenFile: string;
    tls: { cert: string; key: string };
  };
  /** What "stale" means for the alert rules and /health's `stale` flag. */
  slo: { freshnessP95Ms: number; lagMessages: number };
  /**
   * Checkpoints (keyed state, watermarks, dedupe ids, pin and epoch, source position) every intervalMs to
   * JetStream; acks are held until the checkpoint covering them completes, and a restart restores the
   * latest one and replays what came after it. consumer.ackWaitMs must outlast an interval.
   */
  checkpoint: { enabled: boolean; intervalMs: number; bucket: string };
  /**
   * The side-output spool (apps/pipeline/io/spool.ts): a dead letter or late record the broker refuses for a
   * reason other than its size (the side stream deleted, permissions, storage full) is fsynced under
   * `<dir>/<consumer.durable>/` and its source acked; it is published from there, same Msg-Id, once the
   * broker takes it. At most maxBytes pending: beyond, or disabled, such a side output holds its partition
   * (retried in place, `streaminfer_stream_dead_letters_failing`). The directory must be the instance's own
   * disk (a restart on the same host takes over what a dead process left there). dir '': `spool` in the
   * state directory (STREAMINFER_STATE_DIR, as the server's, else ./.state): see spoolDir().
   */
  spool: { enabled: boolean; dir: string; maxBytes: number };
  /**
   * The pipeline process's V8 heap: semiSpaceMb is its young generation's semi-space (--max-semi-space-size);
   * 0 leaves V8's default (16 MiB). Events, messages and effects die young by the thousand per second; a small
   * young generation promotes them to the old one, whose collections mark the whole keyed state.
   */
  runtime: { semiSpaceMb: number };
  logLevel: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace';
}

export const DEFAULT_PIPELINE_CONFIG: PipelineConfig = {
  nats: { servers: 'nats://127.0.0.1:4222' },
  replicas: 1,
  subjectRoot: '',
  streams: {
    events: 'DELIVERY_EVENTS',
    predictions: 'DELIVERY_PREDICTIONS',
    side: 'DELIVERY_SIDE',
    duplicateWindowMs: 120_000,
  },
  consumer: {
    durable: 'streaminfer-delivery',
    // Per partition, and acks wait for the checkpoint: it must hold a partition's rate × the interval.
    maxAckPending: 50_000,
    ackWaitMs: 120_000,
    maxDeliver: 5,
    batchSize: 512,
  },
  concurrency: 2048,
  partitions: 4,
  instance: { id: '', leaseBucket: 'streaminfer_leases', leaseTtlMs: 10_000, maxStallMs: 60_000 },
  eventTime: {
    outOfOrdernessMs: 10_000,
    allowedLatenessMs: 60_000,
    idleTimeoutMs: 10_000,
    stateTtlMs: 20 * 60_000,
    dedupeTtlMs: 15 * 60_000,
    maxClockSkewMs: 5 * 60_000,
    maxEventAgeMs: 3650 * 24 * 3_600_000,
  },
  model: { name: 'delay-risk', version: '1' },
  alertThreshold: 0.8,
  maxEventBytes: 65_536,
  inference: {
    mode: 'embedded',
    modelsDir: './models',
    workers: 1,
    device: 'cpu',
    url: 'ws://127.0.0.1:8000/ws',
    connections: 2,
    maxInflight: 256,
  },
  admin: { host: '127.0.0.1', port: 9470, socket: '', tokenFile: '', tls: { cert: '', key: '' } },
  slo: { freshnessP95Ms: 2000, lagMessages: 10_000 },
  checkpoint: { enabled: true, intervalMs: 30_000, bucket: 'streaminfer_checkpoints' },
  spool: { enabled: true, dir: '', maxBytes: 256 * 1024 * 1024 },
  runtime: { semiSpaceMb: 64 },
  logLevel: 'info',
};

type Shape = { [key: string]: 'string' | 'int' | 'number' | 'boolean' | Shape | readonly string[] };

const SHAPE: Shape = {
  nats: {
    servers: 'string',
    user: 'string',
    passwordFile: 'string',
    tokenFile: 'string',
    nkeyFile: 'string',
    creds: 'string',
    tls: { ca: 'string', cert: 'string', key: 'string', handshakeFirst: 'boolean' },
  },
  replicas: 'int',
  subjectRoot: 'string',
  streams: { events: 'string', predictions: 'string', side: 'string', duplicateWindowMs: 'int' },
  consumer: {
    durable: 'string',
    maxAckPending: 'int',
    ackWaitMs: 'int',
    maxDeliver: 'int',
    batchSize: 'int',
  },
  concurrency: 'int',
  partitions: 'int',
  instance: { id: 'string', leaseBucket: 'string', leaseTtlMs: 'int', maxStallMs: 'int' },
  eventTime: {
    outOfOrdernessMs: 'int',
    allowedLatenessMs: 'int',
    idleTimeoutMs: 'int',
    stateTtlMs: 'int',
    dedupeTtlMs: 'int',
    maxClockSkewMs: 'int',
    maxEventAgeMs: 'int',
  },
  model: { name: 'string', version: 'string' },
  alertThreshold: 'number',
  maxEventBytes: 'int',
  inference: {
    mode: ['embedded', 'external'],
    modelsDir: 'string',
    workers: 'int',
    device: 'string',
    url: 'string',
    connections: 'int',
    maxInflight: 'int',
  },
  admin: {
    host: 'string',
    port: 'int',
    socket: 'string',
    tokenFile: 'string',
    tls: { cert: 'string', key: 'string' },
  },
  slo: { freshnessP95Ms: 'int', lagMessages: 'int' },
  checkpoint: { enabled: 'boolean', intervalMs: 'int', bucket: 'string' },
  spool: { enabled: 'boolean', dir: 'string', maxBytes: 'int' },
  runtime: { semiSpaceMb: 'int' },
  logLevel: ['fatal', 'error', 'warn', 'info', 'debug', 'trace'],
};

function merge(
  shape: Shape,
  base: Record<string, unknown>,
  over: unknown,
  path: string,
): Record<string, unknown> {
  if (typeof over !== 'object' || over === null || Array.isArray(over))
    throw new PipelineConfigError(path || '$', 'must be an object');
  const out: Record<string, unknown> = { ...base };
  for (const [key, value] of Object.entries(over)) {
    const at = path ? `${path}.${key}` : key;
    const kind = shape[key];
    // The older form: `"nats": "nats://host:4222"` sets the servers only.
    if (at === 'nats' && typeof value === 'string') {
      out[key] = { ...(base[key] as Record<string, unknown>), servers: value };
      continue;
    }
    if (kind === undefined)
      throw new PipelineConfigError(at, `unknown setting (known: ${Object.keys(shape).join(', ')})`);
    if (Array.isArray(kind)) {
      if (typeof value !== 'string' || !kind.includes(value))
        throw new PipelineConfigError(at, `must be one of ${kind.join(', ')} (got ${JSON.stringify(value)})`);
      out[key] = value;
    } else if (kind === 'string') {
      if (typeof value !== 'string')
        throw new PipelineConfigError(at, `must be a string (got ${JSON.stringify(value)})`);
      out[key] = value;
    } else if (kind === 'int') {
      if (typeof value !== 'number' || !Number.isSafeInteger(value))
        throw new PipelineConfigError(at, `must be an integer (got ${JSON.stringify(value)})`);
      out[key] = value;
    } else if (kind === 'boolean') {
      if (typeof value !== 'boolean')
        throw new PipelineConfigError(at, `must be true or false (got ${JSON.stringify(value)})`);
      out[key] = value;
    } else if (kind === 'number') {
      if (typeof value !== 'number' || !Number.isFinite(value))
        throw new PipelineConfigError(at, `must be a number (got ${JSON.stringify(value)})`);
      out[key] = value;
    } else {
      out[key] = merge(kind as Shape, (base[key] ?? {}) as Record<string, unknown>, value, at);
    }
  }
  return out;
}

/** maxEventBytes' ceiling: NATS's recommended largest max_payload (an event must fit the broker first). */
const MAX_EVENT_BYTES_LIMIT = 8 * 1024 * 1024;
const SPOOL_MIN_BYTES = 1024 * 1024;

function atLeast(path: string, value: number, min: number): void {
  if (value < min) throw new PipelineConfigError(path, `must be at least ${min} (got ${value})`);
}

/** Defaults ← each override in turn (file, then flags); validated as a whole. */
export function resolvePipelineConfig(...overrides: unknown[]): PipelineConfig {
  let config = DEFAULT_PIPELINE_CONFIG as unknown as Record<string, unknown>;
  for (const over of overrides) if (over !== undefined) config = merge(SHAPE, config, over, '');
  const c = config as unknown as PipelineConfig;
  if (!/^(nats|tls):\/\/[^\s,]+(,(nats|tls):\/\/[^\s,]+)*$/.test(c.nats.servers))
    throw new PipelineConfigError(
      'nats.servers',
      `not nats:// or tls:// URLs: ${JSON.stringify(redactNatsUrls(c.nats.servers))}`,
    );
  if (c.replicas < 1 || c.replicas > MAX_REPLICAS)
    throw new PipelineConfigError('replicas', `must be 1 to ${MAX_REPLICAS} (got ${c.replicas})`);
  if (c.subjectRoot !== '' && !/^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/.test(c.subjectRoot))
    throw new PipelineConfigError('subjectRoot', 'must be plain subject tokens separated by dots');
  for (const key of ['events', 'predictions', 'side'] as const) {
    if (!/^[A-Za-z0-9_-]{1,64}$/.test(c.streams[key]))
      throw new PipelineConfigError(`streams.${key}`, 'must be a stream name (letters, digits, _ and -)');
  }
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(c.consumer.durable))
    throw new PipelineConfigError('consumer.durable', 'must be a consumer name (letters, digits, _ and -)');
  atLeast('streams.duplicateWindowMs', c.streams.duplicateWindowMs, 1000);
  atLeast('consumer.maxAckPending', c.consumer.maxAckPending, 1);
  atLeast('consumer.ackWaitMs', c.consumer.ackWaitMs, 1000);
  if (c.consumer.maxDeliver !== -1) atLeast('consumer.maxDeliver', c.consumer.maxDeliver, 2);
  atLeast('consumer.batchSize', c.consumer.batchSize, 1);
  if (c.consumer.batchSize > c.consumer.maxAckPending)
    throw new PipelineConfigError('consumer.batchSize', 'must not exceed consumer.maxAckPending');
  atLeast('concurrency', c.concurrency, 1);
  if (c.concurrency > c.consumer.maxAckPending)
    throw new PipelineConfigError(
      'concurrency',
      'must not exceed consumer.maxAckPending (the broker would stall it)',
    );
  atLeast('partitions', c.partitions, 1);
  if (c.partitions > 1024)
    throw new PipelineConfigError('partitions', `must be at most 1024 (got ${c.partitions})`);
  if (c.instance.id !== '' && !/^[A-Za-z0-9_-]{1,64}$/.test(c.instance.id))
    throw new PipelineConfigError(
      'instance.id',
      'must be letters, digits, _ and - (or empty: host name and pid)',
    );
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(c.instance.leaseBucket))
    throw new PipelineConfigError('instance.leaseBucket', 'must be a bucket name (letters, digits, _ and -)');
  atLeast('instance.leaseTtlMs', c.instance.leaseTtlMs, 1000);
  if (c.instance.maxStallMs <= c.instance.leaseTtlMs)
    throw new PipelineConfigError(
      'instance.maxStallMs',
      `must be greater than instance.leaseTtlMs (${c.instance.leaseTtlMs}): a stall shorter than the TTL never costs a lease (got ${c.instance.maxStallMs})`,
    );
  const et = c.eventTime;
  atLeast('eventTime.outOfOrdernessMs', et.outOfOrdernessMs, 0);
  atLeast('eventTime.allowedLatenessMs', et.allowedLatenessMs, 0);
  atLeast('eventTime.idleTimeoutMs', et.idleTimeoutMs, 1);
  // The features look back 10 minutes: state must outlive that plus the lateness a revision may come in.
  const floor = 10 * 60_000 + et.allowedLatenessMs;
  atLeast('eventTime.stateTtlMs', et.stateTtlMs, floor);
  atLeast('eventTime.dedupeTtlMs', et.dedupeTtlMs, floor);
  // Below a second, honest clocks (NTP keeps them within milliseconds) would be dead-lettered.
  atLeast('eventTime.maxClockSkewMs', et.maxClockSkewMs, 1000);
  // An event that could still be on time is never refused as too old.
  atLeast('eventTime.maxEventAgeMs', et.maxEventAgeMs, et.outOfOrdernessMs + et.allowedLatenessMs);
  if (!/^[A-Za-z0-9_.-]{1,128}$/.test(c.model.name))
    throw new PipelineConfigError('model.name', 'not a model name');
  if (!/^[A-Za-z0-9_.-]{1,64}$/.test(c.model.version))
    throw new PipelineConfigError('model.version', 'not a version');
  if (!(c.alertThreshold > 0 && c.alertThreshold < 1))
    throw new PipelineConfigError('alertThreshold', `must be in (0, 1) (got ${c.alertThreshold})`);
  if (c.maxEventBytes < 512 || c.maxEventBytes > MAX_EVENT_BYTES_LIMIT)
    throw new PipelineConfigError(
      'maxEventBytes',
      `must be ${512} to ${MAX_EVENT_BYTES_LIMIT} bytes (got ${c.maxEventBytes})`,
    );
  atLeast('inference.workers', c.inference.workers, 1);
  atLeast('inference.connections', c.inference.connections, 1);
  atLeast('inference.maxInflight', c.inference.maxInflight, 1);
  if (c.inference.mode === 'external' && !/^wss?:\/\/[^\s]+$/.test(c.inference.url))
    throw new PipelineConfigError('inference.url', `not a ws:// URL: ${c.inference.url}`);
  if (c.admin.port < 0 || c.admin.port > 65535)
    throw new PipelineConfigError('admin.port', 'must be 0..65535');
  if ((c.admin.tls.cert === '') !== (c.admin.tls.key === ''))
    throw new PipelineConfigError('admin.tls', 'needs both cert and key (PEM files)');
  if (Buffer.byteLength(c.admin.socket) > 107)
    throw new PipelineConfigError('admin.socket', 'a unix socket path is at most 107 bytes');
  atLeast('slo.freshnessP95Ms', c.slo.freshnessP95Ms, 1);
  atLeast('slo.lagMessages', c.slo.lagMessages, 1);
  atLeast('checkpoint.intervalMs', c.checkpoint.intervalMs, 100);
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(c.checkpoint.bucket))
    throw new PipelineConfigError('checkpoint.bucket', 'must be a bucket name (letters, digits, _ and -)');
  if (c.spool.dir !== '' && c.spool.dir.trim() === '')
    throw new PipelineConfigError('spool.dir', "must be a directory ('': the state directory's spool)");
  // At least one side output of NATS's default max_payload (1 MiB; keep it at least the broker's), at most 1 TiB.
  if (c.spool.maxBytes < SPOOL_MIN_BYTES || c.spool.maxBytes > 2 ** 40)
    throw new PipelineConfigError(
      'spool.maxBytes',
      `must be ${SPOOL_MIN_BYTES} to ${2 ** 40} bytes (got ${c.spool.maxBytes})`,
    );
  if (c.runtime.semiSpaceMb < 0 || c.runtime.semiSpaceMb > 1024)
    throw new PipelineConfigError(
      'runtime.semiSpaceMb',
      `must be 0 (V8's default) to 1024 MiB (got ${c.runtime.semiSpaceMb})`,
    );
  if (c.checkpoint.enabled && c.consumer.ackWaitMs < 3 * c.checkpoint.intervalMs)
    throw new PipelineConfigError(
      'consumer.ackWaitMs',
      `must be at least 3 × checkpoint.intervalMs (${3 * c.checkpoint.intervalMs}): acks wait for the checkpoint`,
    );
  return c;
}

/**
 * The spool's directory: spool.dir, or `spool` in the state directory the server uses too
 * (STREAMINFER_STATE_DIR, default ./.state; the container image sets it to its volume).
 */
export function spoolDir(config: PipelineConfig, env: NodeJS.ProcessEnv = process.env): string {
  if (config.spool.dir !== '') return config.spool.dir;
  const state = env.STREAMINFER_STATE_DIR;
  return `${state !== undefined && state !== '' ? state.replace(/\/+$/, '') : './.state'}/spool`;
}
