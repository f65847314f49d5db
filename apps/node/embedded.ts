/**
 * A headless node inside another process (the stream pipeline's embedded inference): the server's model table,
 * worker pool, request rings, admission, pending requests and answers, without uWS and without listening. A call
 * is a third kind of peer (an InProcessCall answered by the in-process Reply), so it passes the same admission
 * (queue bound, validation), the same rings and the same micro-batcher as a WebSocket request, and concurrent
 * calls are batched by the workers across callers. Its answer settles a promise: the first output as float32
 * values, or a ProtocolError with the protocol's code (overloaded, unknown_version, unavailable, ...).
 */
import { existsSync, statSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import * as path from 'node:path';
import type { Logger } from 'pino';
import pino from 'pino';
import { ClientState } from '../../libs/backpressure';
import type { DeviceTarget } from '../../libs/config';
import { parseDeviceEntry, resolveConfig } from '../../libs/config';
import { defaultIntraOpThreads } from '../../libs/device';
import { MetricsShard, metricsBufferFor, readSlotTotals } from '../../libs/metrics';
import type { BinaryRequest, Priority } from '../../libs/protocol';
import { ProtocolError, unknownModel } from '../../libs/protocol';
import type { ModelEntry, TablePlan } from '../../libs/registry';
import { readModel, scanRepository, versionReloadPlan } from '../../libs/registry';
import { sharedClock as clock, RingBuffer } from '../../libs/ring';
import { Admission, Rejection } from './admission';
import { Answers } from './answers';
import { EPOCH_HOLD_MAX_BYTES, EPOCH_HOLD_MAX_MS } from './epoch-order';
import type { NodeStartOptions } from './ipc';
import { PendingRequests } from './pending';
import type { Replies } from './reply';
import { createReplies } from './reply';
import type { InProcessCall, Transport } from './request';
import { PROTOCOL_EMBEDDED } from './request';
import { RingWriter } from './ring-writer';
import { Shadow } from './shadow';
import { ModelTable } from './table';
import { WorkerThreads } from './worker-threads';

/** The same rule as the repository's model and version directory names (and no path tricks). */
const NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;
const MAX_WORKERS = 64;
const MAX_INTRA_OP_THREADS = 256;
/** The server's defaults (no flag, no environment, no file): a headless node runs like a plain `serve`. */
const DEFAULTS = resolveConfig();

export interface EmbeddedNodeOptions {
  /** The model repository (`<model>/config.json`, `<model>/<version>/model.onnx`), as the server reads it. */
  modelsDir: string;
  /** Worker threads, each with its own ONNX Runtime session per loaded version. Default 1. */
  workers?: number;
  /** `cpu` (default), `auto`, `cuda:N` or `webgpu:N`. */
  device?: string;
  /** ONNX Runtime intra-op threads per session. Default: the server's rule ((cores − 1) / workers, at least 1). */
  intraOpThreads?: number;
  logger?: Logger;
  /** Calls admitted at once (the in-process caller's in-flight cap; above it: `client_queue_full`). Default 4096. */
  maxInflight?: number;
  /** Queue bound per model version (above it: `overloaded`), as the server's --max-model-queue. Default 4096. */
  maxModelQueue?: number;
  /** Deadline of a call that sets none (then `deadline_exceeded`). Default 30000. */
  requestTimeoutMs?: number;
  /** Bytes of the normal-priority request ring of each loaded version (the server's --ring-bytes). Default 8 MiB. */
  ringBytes?: number;
}

export interface InferOptions {
  /** Per-item dims of the input; default [row.length] for a rank-1 input, the fixed shape otherwise. */
  dims?: number[];
  deadlineMs?: number;
  priority?: Priority;
}

/** Batches the workers ran for one loaded version, from the worker metrics (the batch-size histogram). */
export interface BatchStats {
  batches: number;
  /** Requests in those batches. */
  items: number;
  meanBatchSize: number;
}

/** Nothing is ever sent by a headless node: a Reply that tried would be a bug, reported as one. */
const NO_TRANSPORT: Transport = {
  sendWs: () => {
    throw new Error('an embedded node has no WebSocket transport');
  },
  sendHttp: () => {
    throw new Error('an embedded node has no HTTP transport');
  },
};

/** One in-process call: the peer of its pending request, settling its promise once. */
class Call implements InProcessCall {
  readonly protocol = PROTOCOL_EMBEDDED;
  output: Float32Array | undefined = undefined;
  failure: ProtocolError | undefined = undefined;

  constructor(
    private readonly resolve: (output: Float32Array) => void,
    private readonly reject: (error: ProtocolError) => void,
  ) {}

  settle(): void {
    if (this.failure !== undefined) this.reject(this.failure);
    else if (this.output !== undefined) this.resolve(this.output);
    else this.reject(new ProtocolError('internal', 'answered with neither an output nor an error'));
  }
}

export class EmbeddedNode {
  private readonly table: ModelTable;
  private readonly threads: WorkerThreads;
  private readonly metrics: SharedArrayBuffer;
  private readonly replies: Replies;
  private readonly pending: PendingRequests;
  private readonly admission: Admission;
  private readonly answers: Answers;
  /** The one client of this node (the host process): its in-flight cap; no rate limit. */
  private readonly client: ClientState;
  private readonly logger: Logger;
  /** What is loaded, as a plan: prepare extends it with the registry's own transition. */
  private plan: TablePlan = { models: [], defaultModel: '' };
  /** One table change at a time. */
  private reloadChain: Promise<unknown> = Promise.resolve();
  private closing: Promise<void> | undefined;

  private constructor(
    private readonly options: NodeStartOptions,
    logger: Logger,
    maxInflight: number,
  ) {
    this.logger = logger;
    this.metrics = metricsBufferFor(1 + options.workers);
    const responses = RingBuffer.create(options.ringBytes);
    responses.setOwnerId(1);
    this.threads = new WorkerThreads({
      nodeIndex: options.nodeIndex,
      workers: options.workers,
      device: options.device,
      intraOpThreads: options.intraOpThreads,
      responseRing: responses.buffer,
      metrics: this.metrics,
      logLevel: options.logLevel,
      logger,
      onWorkerDeath: (workerIndex, claimed, ringOwnerId) =>
        this.onWorkerDeath(responses, workerIndex, claimed, ringOwnerId),
    });
    this.table = new ModelTable(options, this.threads, this.metrics, logger);
    const shard = new MetricsShard(this.metrics, 0);
    const onError = (where: string, error: unknown): void =>
      logger.error({ where, err: (error as Error)?.message ?? String(error) }, 'embedded answer path failed');
    this.replies = createReplies(NO_TRANSPORT);
    // No WebSocket peer here, so nothing is ever held for answer order: the hold limits are the server's.
    this.pending = new PendingRequests(
      { maxHoldMs: EPOCH_HOLD_MAX_MS, maxHoldBytes: EPOCH_HOLD_MAX_BYTES },
      clock,
      () => undefined,
      (error) => onError('hold timer', error),
    );
    const writer = new RingWriter();
    const shadow = new Shadow(this.table, this.pending, writer, shard, this.replies.silent);
    this.admission = new Admission(options, this.table, shard, writer, this.pending, shadow, clock);
    this.answers = new Answers(responses, this.pending, this.table.slots, shard, shadow, clock, onError);
    this.client = new ClientState(
      {
        rateLimitRps: 0,
        maxInflightPerClient: maxInflight,
        maxModelQueue: options.backpressure.maxModelQueue,
      },
      clock(),
    );
  }

  /** Starts the workers (no model loaded yet: see prepare). Options are checked first: a ProtocolError `bad_request`. */
  static start(options: EmbeddedNodeOptions): EmbeddedNode {
    const resolved = resolveOptions(options);
    const logger = options.logger ?? pino({ level: 'warn', base: { component: 'embedded-inference' } });
    const node = new EmbeddedNode(resolved, logger, options.maxInflight ?? 4096);
    node.threads.start();
    node.answers.start();
    return node;
  }

  /** Calls admitted and not answered yet. */
  get inflight(): number {
    return this.pending.size;
  }

  get closed(): boolean {
    return this.closing !== undefined;
  }

  /** Whether `model` `version` is loaded and answerable. */
  has(model: string, version: string): boolean {
    return this.table.models.get(model)?.versions.has(version) === true;
  }

  /**
   * Loads `model` `version` unless it is loaded (a table reload: prepare, then commit). Rejects with a
   * ProtocolError: `unknown_model` / `unknown_version` when the repository has no such model or version,
   * `reload_failed` when it cannot be loaded (bad config.json, a model file the runtime refuses),
   * `unavailable` once closed.
   */
  prepare(model: string, version: string): Promise<void> {
    return this.tableStep(() => this.load(model, version));
  }

  /** Unloads `model` `version` once every call admitted for it is answered (nothing when it is not loaded). */
  release(model: string, version: string): Promise<void> {
    return this.tableStep(async () => {
      if (!this.has(model, version)) return;
      const models = this.plan.models
        .map((entry) =>
          entry.name !== model ? entry : { ...entry, versions: entry.versions.filter((v) => v !== version) },
        )
        .filter((entry) => entry.versions.length > 0)
        .map((entry) =>
          entry.versions.includes(entry.stable)
            ? entry
            : { name: entry.name, versions: entry.versions, stable: entry.versions[0]! },
        );
      const plan: TablePlan = { models, defaultModel: models[0]?.name ?? '' };
      await this.table.release(plan);
      this.plan = plan;
    });
  }

  /**
   * One input row for `model` `version` (its single input; `dims` for a rank above 1) → the model's first output
   * as float32 values. The row is copied into the request ring before this returns: the caller may reuse it.
   * Rejects with a ProtocolError carrying the protocol's code; never hangs (a call nobody answers is answered
   * `deadline_exceeded` by the sweeper, one held by a worker that died `internal`).
   */
  infer(
    model: string,
    version: string,
    row: Float32Array,
    options: InferOptions = {},
  ): Promise<Float32Array> {
    return new Promise<Float32Array>((resolve, reject) => {
      const call = new Call(resolve, reject);
      const startedAt = clock();
      const reply = this.replies.inProcess;
      let request: BinaryRequest;
      try {
        request = this.requestOf(model, version, row, options);
      } catch (error) {
        reject(error instanceof ProtocolError ? error : new ProtocolError('bad_request', String(error)));
        return;
      }
      const admitted = this.admission.admitTensors(request, startedAt, reply, call, this.client);
      if (admitted instanceof Rejection) this.answers.reject(call, reply, admitted, startedAt);
    });
  }

  /** Batches run so far for a loaded version, from the workers' batch-size histogram (undefined: not loaded). */
  batchStats(model: string, version: string): BatchStats | undefined {
    const slot = this.table.models.get(model)?.versions.get(version);
    if (!slot) return undefined;
    const histogram = readSlotTotals(this.metrics, slot.index).batchSize;
    return {
      batches: histogram.count,
      items: histogram.sum,
      meanBatchSize: histogram.count > 0 ? histogram.sum / histogram.count : 0,
    };
  }

  /**
   * Refuses new calls (`unavailable`), waits up to `drainMs` for those admitted, answers the rest `unavailable`,
   * then stops the workers. Every call admitted before settles.
   */
  close(drainMs = 0): Promise<void> {
    this.closing ??= this.shutDown(drainMs);
    return this.closing;
  }

  private async shutDown(drainMs: number): Promise<void> {
    this.admission.draining = true;
    // A load in progress finishes (or fails) before its workers are stopped under it.
    await this.reloadChain;
    const abandoned = await this.answers.waitForIdle(Math.max(0, drainMs));
    // Answers keep being drained (and dropped: nobody waits for them) while the workers finish what they hold.
    await this.threads.drain();
    this.answers.stop();
    this.logger.info({ abandoned }, 'embedded inference closed');
  }

  private tableStep(step: () => Promise<void>): Promise<void> {
    const run = this.reloadChain.then(() => {
      if (this.closing) throw new ProtocolError('unavailable', 'embedded inference is closed');
      return step();
    });
    this.reloadChain = run.catch(() => undefined);
    return run;
  }

  private async load(model: string, version: string): Promise<void> {
    if (this.has(model, version)) return;
    const entry = this.readEntry(model);
    const found = entry.versions.map((candidate) => candidate.version);
    const planned = versionReloadPlan(this.plan, model, version, found, 'atomic');
    if (!planned.ok) throw planned.error;
    const plan: TablePlan = { ...planned.value, defaultModel: this.plan.defaultModel || model };
    try {
      await this.table.prepare(plan);
    } catch (error) {
      throw new ProtocolError(
        'reload_failed',
        `cannot load ${model} version ${version}: ${(error as Error).message}`,
      );
    }
    this.table.commit(plan, this.table.epoch + 1);
    this.plan = plan;
  }

  /** The repository's entry of `model`, read now (as the supervisor does for a reload). */
  private readEntry(model: string): ModelEntry {
    const dir = this.options.modelsDir;
    if (!NAME_PATTERN.test(model) || !existsSync(path.join(dir, model, 'config.json'))) {
      let available: string[] = [];
      try {
        available = scanRepository(dir).map((entry) => entry.name);
      } catch {
        // The listing is only for the message.
      }
      throw unknownModel(model, available);
    }
    try {
      return readModel(path.join(dir, model), model);
    } catch (error) {
      throw new ProtocolError('reload_failed', (error as Error).message);
    }
  }

  /** The call as a decoded binary request: the row's bytes are the tensor's, bound and copied by admission. */
  private requestOf(model: string, version: string, row: Float32Array, options: InferOptions): BinaryRequest {
    if (!(row instanceof Float32Array))
      throw new ProtocolError('type_mismatch', 'an in-process input row must be a Float32Array');
    const request: BinaryRequest = {
      id: null,
      model,
      version,
      input: undefined,
      inputs: undefined,
      text: undefined,
      deadlineMs: options.deadlineMs,
      priority: options.priority ?? 'normal',
      tensors: [],
    };
    // An unknown model or version gets no tensor: admission answers it with its own typed error.
    const spec = this.table.models.get(model)?.versions.get(version)?.model.signature.inputs[0];
    if (spec === undefined) return request;
    const dims = options.dims ?? (spec.shape.length === 1 ? [row.length] : spec.shape);
    const elements = dims.reduce((product, dim) => product * dim, 1);
    // Binding checks dims against the signature; the byte count against the dims is ours to check.
    if (elements !== row.length)
      throw new ProtocolError(
        'shape_mismatch',
        `input "${spec.name}" of dims [${dims.join(', ')}] holds ${elements} values, the row ${row.length}`,
      );
    request.tensors.push({
      name: spec.name,
      dims,
      dtype: 'float32',
      bytes: new Uint8Array(row.buffer, row.byteOffset, row.byteLength),
    });
    return request;
  }

  /** A worker died: the locks it held are released, its written answers delivered, the rest failed `internal`. */
  private onWorkerDeath(
    responses: RingBuffer,
    workerIndex: number,
    claimed: number[],
    ringOwnerId: number | undefined,
  ): void {
    if (ringOwnerId !== undefined) {
      responses.forceReleaseLocks(ringOwnerId);
      this.table.forceReleaseLocks(ringOwnerId);
    }
    const failed = this.answers.failClaimedBy(workerIndex, claimed);
    this.logger.warn({ worker: workerIndex, failed }, 'answered the calls of a dead worker');
  }
}

/** Node start options for a headless node: the server's defaults, with what the caller set checked first. */
function resolveOptions(options: EmbeddedNodeOptions): NodeStartOptions {
  const bad = (message: string): never => {
    throw new ProtocolError('bad_request', `embedded inference: ${message}`);
  };
  if (typeof options !== 'object' || options === null) bad('options must be an object');
  if (typeof options.modelsDir !== 'string' || options.modelsDir.length === 0)
    bad('modelsDir must name a directory');
  const modelsDir = path.resolve(options.modelsDir);
  if (!existsSync(modelsDir) || !statSync(modelsDir).isDirectory())
    bad(`modelsDir ${modelsDir} is not a directory`);
  const integer = (
    name: string,
    value: number | undefined,
    fallback: number,
    min: number,
    max: number,
  ): number => {
    if (value === undefined) return fallback;
    if (!Number.isInteger(value) || value < min || value > max)
      bad(`${name} must be an integer from ${min} to ${max} (got ${String(value)})`);
    return value;
  };
  const workers = integer('workers', options.workers, 1, 1, MAX_WORKERS);
  let device: DeviceTarget = { kind: 'cpu' };
  if (options.device !== undefined) {
    const parsed = typeof options.device === 'string' ? parseDeviceEntry(options.device) : undefined;
    if (!parsed) bad(`device must be cpu, auto, cuda:N or webgpu:N (got ${String(options.device)})`);
    device = parsed!;
  }
  const intraOpThreads = integer(
    'intraOpThreads',
    options.intraOpThreads,
    defaultIntraOpThreads(availableParallelism(), workers),
    1,
    MAX_INTRA_OP_THREADS,
  );
  integer('maxInflight', options.maxInflight, 4096, 1, 1_000_000);
  const maxModelQueue = integer('maxModelQueue', options.maxModelQueue, DEFAULTS.maxModelQueue, 1, 1_000_000);
  const requestTimeoutMs = integer(
    'requestTimeoutMs',
    options.requestTimeoutMs,
    DEFAULTS.requestTimeoutMs,
    1,
    3_600_000,
  );
  const ringBytes = integer('ringBytes', options.ringBytes, DEFAULTS.ringBytes, 64 * 1024, 2 ** 30);
  if ((ringBytes & (ringBytes - 1)) !== 0) bad(`ringBytes must be a power of two (got ${ringBytes})`);
  return {
    nodeIndex: 0,
    port: 0,
    host: '',
    device,
    workers,
    intraOpThreads,
    modelsDir,
    defaultModel: '',
    ringBytes,
    testHooks: false,
    metricsOnDataPort: false,
    plan: { models: [], defaultModel: '' },
    epoch: 0,
    // The model's config.json decides its batching, as on the server when no batch flag is given.
    batch: {
      policy: DEFAULTS.batchPolicy,
      maxBatchSize: DEFAULTS.batchSize,
      maxQueueDelayMs: DEFAULTS.batchTimeoutMs,
      explicitSize: false,
      explicitTimeout: false,
      explicitPolicy: false,
    },
    maxPayloadBytes: DEFAULTS.maxPayloadBytes,
    requestTimeoutMs,
    backpressure: {
      rateLimitRps: 0,
      rateLimitBurst: 0,
      modelErrorPenalty: 0,
      maxInflightPerClient: options.maxInflight ?? 4096,
      maxModelQueue,
      slowConsumerWarnBytes: DEFAULTS.slowConsumerWarnBytes,
      slowConsumerCloseBytes: DEFAULTS.slowConsumerCloseBytes,
      trustForwardedFor: false,
      trustedProxies: undefined,
      rateLimitKey: 'connection',
      maxConnections: 0,
      maxConnectionsPerIp: 0,
      maxProtocolErrorsPerSecond: 0,
      maxRateLimitedPerSecond: 0,
      errorCoalesceMs: 0,
    },
    shutdownTimeoutMs: DEFAULTS.shutdownTimeoutMs,
    logLevel: options.logger?.level ?? 'warn',
  };
}
