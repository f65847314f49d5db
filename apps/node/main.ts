/**
 * Node process (forked by the supervisor): a gateway on the main thread plus the worker threads it owns.
 * Started with a 'start' message over IPC: loads the host's table, says 'loaded', and listens only on the
 * supervisor's 'listen' (after a 'sync' to a table committed meanwhile). Answers control collections; drains on
 * 'shutdown', SIGTERM or the loss of the supervisor.
 */
import pino from 'pino';
import { Registry } from 'prom-client';
import { labelledProcessJson, metricsBufferFor, registerProcessMetrics } from '../../libs/metrics';
import { encodeError, httpStatusOf } from '../../libs/protocol';
import type { NodeSettings, NodeTls } from '../../libs/registry';
import { RingBuffer } from '../../libs/ring';
import { testDelayMs } from '../../libs/test-hooks';
import { assertNativeUws } from '../../libs/uws';
import { VersionLoadError } from './errors';
import { Gateway } from './gateway';
import type { ControlResponse, NodeMessage, NodeStartOptions, SupervisorMessage } from './ipc';
import { ModelTable, nodeSettingsOf } from './table';
import { reloadTls } from './tls-files';
import { WorkerThreads } from './worker-threads';

function send(message: NodeMessage): void {
  if (process.connected) process.send?.(message);
}

class NodeProcess {
  private gateway: Gateway | undefined;
  private threads: WorkerThreads | undefined;
  private metrics: SharedArrayBuffer | undefined;
  /** This process's CPU, memory, heap and event-loop lag (the gateway's thread), labelled with the node. */
  private readonly processMetrics = new Registry();
  private table: ModelTable | undefined;
  /** One reload step at a time on this node (the supervisor also serialises reloads). */
  private reloadChain: Promise<unknown> = Promise.resolve();
  private state: 'starting' | 'ready' | 'draining' = 'starting';
  private readonly controlWaiters = new Map<number, (response: ControlResponse) => void>();
  private nextControlId = 1;
  /** Mutual TLS: listens waiting for the host's listening socket from the supervisor. */
  private readonly listenHandleWaiters: Array<(handle: unknown) => void> = [];
  private logger = pino({ base: { component: 'node' } });
  private options: NodeStartOptions | undefined;
  private shuttingDown: Promise<void> | undefined;
  /** What applySettings last applied (start options at first), as JSON: an unchanged plan changes nothing. */
  private appliedSettings = '';

  async start(options: NodeStartOptions): Promise<void> {
    this.options = options;
    this.logger = pino({
      level: options.logLevel,
      base: { component: 'node', node: options.nodeIndex, pid: process.pid },
    });
    assertNativeUws();
    registerProcessMetrics(this.processMetrics, 'streaminfer_node_', { node: String(options.nodeIndex) });
    this.metrics = metricsBufferFor(1 + options.workers);
    const responseRing = RingBuffer.create(options.ringBytes);
    responseRing.setOwnerId(1);
    this.threads = new WorkerThreads({
      nodeIndex: options.nodeIndex,
      workers: options.workers,
      device: options.device,
      intraOpThreads: options.intraOpThreads,
      responseRing: responseRing.buffer,
      metrics: this.metrics,
      logLevel: options.logLevel,
      logger: this.logger,
      onWorkerDeath: (workerIndex, claimed, ringOwnerId) => {
        const gateway = this.gateway;
        if (!gateway) return;
        if (ringOwnerId !== undefined) {
          // A thread that died inside reserve/claim would hold that ring's lock forever.
          responseRing.forceReleaseLocks(ringOwnerId);
          this.table?.forceReleaseLocks(ringOwnerId);
        }
        const failed = gateway.answers.failClaimedBy(workerIndex, claimed);
        this.logger.warn({ worker: workerIndex, failed }, 'answered the requests of a dead worker');
      },
    });
    this.threads.start();
    const table = new ModelTable(options, this.threads, this.metrics, this.logger);
    this.table = table;
    // uWS loads certificate files without a word when they are broken: check them here first.
    if (options.tls) options.tls = this.checkedTls(options.tls);
    this.gateway = new Gateway(options, table, responseRing, this.metrics, this.logger, {
      forwardControl: (request, reply) => {
        const requestId = this.nextControlId++;
        this.controlWaiters.set(requestId, reply);
        send({ type: 'control-request', requestId, request });
      },
      listenHandle: () =>
        new Promise((resolve) => {
          this.listenHandleWaiters.push(resolve);
          send({ type: 'want-listen-handle', nodeIndex: options.nodeIndex });
        }),
    });
    this.gateway.startAnswering();
    this.gateway.admission.fence = options.fence;
    // No listen before every model is loaded: a (re)starting node would answer unknown_model. The supervisor
    // says when to listen, after bringing the node to the host's current table if a reload committed meanwhile.
    const delayMs = testDelayMs('RESTART_LOAD_DELAY_MS');
    if (options.testHooks && (options.restarts ?? 0) > 0 && delayMs > 0)
      await new Promise((resolve) => setTimeout(resolve, delayMs));
    const failures = await this.table.loadPlan(options.plan, options.epoch);
    for (const failure of failures) this.logger.error(failure, 'model version did not load');
    send({
      type: 'loaded',
      nodeIndex: options.nodeIndex,
      epoch: options.epoch,
      ...(failures.length > 0 ? { failures } : {}),
    });
  }

  /** The supervisor's go: the table is the host's, so traffic may come (port 0 only on a first start: the kernel picks). */
  private async listen(port: number): Promise<void> {
    const options = this.options!;
    if (this.state !== 'starting') return;
    const bound = await this.gateway!.listen(options.host, port);
    send({ type: 'listening', nodeIndex: options.nodeIndex, port: bound });
    this.state = 'ready';
    send({ type: 'ready', nodeIndex: options.nodeIndex, health: this.health() });
  }

  /** A configuration reload reaching this node (a COMMIT, or the end of its roll). */
  private async applySettings(settings: NodeSettings | undefined): Promise<void> {
    if (!settings) return;
    const text = canonicalJson(settings);
    if (text === (this.appliedSettings ||= canonicalJson(nodeSettingsOf(this.options!)))) return;
    this.logger.level = settings.logLevel;
    applyToOptions(this.options!, settings);
    this.gateway!.applySettings();
    this.applyTls(settings.tls);
    await this.table!.applySettings(settings);
    this.appliedSettings = text;
    // Tenants by name only: their key digests stay out of the log.
    const tenants = settings.tenants?.map((tenant) => tenant.name);
    this.logger.info({ settings: { ...settings, tenants } }, 'settings applied');
  }

  /** The files re-read and checked (libs/config checkTlsMaterial); its warnings logged. Throws ConfigError. */
  private checkedTls(tls: NodeTls): NodeTls {
    const loaded = reloadTls(tls, Date.now());
    for (const warning of loaded.warnings) this.logger.warn(warning);
    return loaded.tls;
  }

  /**
   * A reload's TLS files, when they differ from those served (other paths, or a file swapped on disk: a new
   * fingerprint): re-read and checked here, then a fresh listener takes new connections while open ones stay
   * (Gateway.useTls). A file that does not pass keeps the certificate served now: logged, never fatal.
   */
  private applyTls(wanted: NodeTls | undefined): void {
    const gateway = this.gateway!;
    if (canonicalJson(wanted) === canonicalJson(gateway.tlsInUse)) return;
    try {
      const tls = wanted ? this.checkedTls(wanted) : undefined;
      gateway.useTls(tls);
      this.options!.tls = tls;
      this.logger.info(
        { certFingerprint: tls?.certFingerprint, clientCa: tls?.clientCaFile },
        'TLS certificate reloaded: new connections get it, open ones stay',
      );
    } catch (error) {
      this.logger.error(
        { err: (error as Error).message, certFingerprint: gateway.tlsInUse?.certFingerprint },
        'TLS certificate not reloaded; still serving the previous one',
      );
    }
  }

  private failStart(error: Error): void {
    this.logger.error({ err: error.message }, 'node failed to start');
    send({ type: 'start-failed', nodeIndex: this.options?.nodeIndex ?? -1, error: error.message });
    setTimeout(() => process.exit(1), 100);
  }

  private reloadStep(requestId: number, step: () => Promise<unknown>): void {
    const run = this.reloadChain.then(step);
    this.reloadChain = run.catch(() => undefined);
    run.then(
      (data) => send({ type: 'command-result', requestId, ok: true, data }),
      (error: Error) => {
        this.logger.error({ err: error.message }, 'reload step failed');
        // A version that did not load is named, so the host can list it unavailable.
        const data = error instanceof VersionLoadError ? { failed: error.failure } : undefined;
        send({
          type: 'command-result',
          requestId,
          ok: false,
          error: error.message,
          ...(data ? { data } : {}),
        });
      },
    );
  }

  /** Test hook (STREAMINFER_TEST_HOOKS=1 only): STREAMINFER_TEST_HOLD_PREPARE_MS holds every PREPARE that long. */
  private async holdPrepareForTest(): Promise<void> {
    const ms = this.options?.testHooks ? testDelayMs('HOLD_PREPARE_MS') : 0;
    if (!(ms > 0)) return;
    this.logger.info({ ms }, 'test hook: holding PREPARE');
    await new Promise((resolve) => setTimeout(resolve, ms));
  }

  private health() {
    return this.gateway!.status.health(
      this.options!.nodeIndex,
      this.state,
      this.threads?.size ?? 0,
      this.threads?.workersAlive() ?? 0,
    );
  }

  onMessage(message: SupervisorMessage, handle?: unknown): void {
    switch (message.type) {
      case 'listen-handle': {
        // One answer per want-listen-handle; a socket nobody waits for any more is closed, not kept open.
        const waiter = this.listenHandleWaiters.shift();
        if (waiter) waiter(handle);
        else (handle as { close?: () => void } | undefined)?.close?.();
        return;
      }
      case 'start':
        this.start(message.options).catch((error: Error) => this.failStart(error));
        return;
      case 'listen':
        this.listen(message.port).catch((error: Error) => this.failStart(error));
        return;
      case 'sync':
        this.reloadStep(message.requestId, async () => {
          await this.table!.syncTo(message.plan, message.epoch);
          await this.applySettings(message.plan.settings);
          this.logger.info({ epoch: message.epoch }, 'model table synced to the host before listening');
          return { epoch: message.epoch };
        });
        return;
      case 'control-response': {
        const waiter = this.controlWaiters.get(message.requestId);
        this.controlWaiters.delete(message.requestId);
        waiter?.(message.response);
        return;
      }
      case 'collect':
        if (!this.gateway || !this.metrics) {
          send({ type: 'collected', requestId: message.requestId });
          return;
        }
        if (message.what === 'metrics') {
          const metrics = this.gateway.status.metricsJson(this.metrics);
          labelledProcessJson(this.processMetrics).then(
            (own) => send({ type: 'collected', requestId: message.requestId, metrics: [...metrics, ...own] }),
            (error: Error) => {
              this.logger.warn({ err: error.message }, 'process metrics not collected');
              send({ type: 'collected', requestId: message.requestId, metrics });
            },
          );
        } else send({ type: 'collected', requestId: message.requestId, health: this.health() });
        return;
      case 'crash-worker': {
        const ok =
          this.options?.testHooks === true &&
          this.threads !== undefined &&
          this.threads.crashWorker(message.workerIndex);
        send({
          type: 'command-result',
          requestId: message.requestId,
          ok,
          error: ok ? undefined : 'test hooks disabled or no such worker',
        });
        return;
      }
      case 'prepare':
        this.reloadStep(message.requestId, async () => {
          await this.holdPrepareForTest();
          if (message.plan.settings) this.table!.checkSettings(message.plan.settings);
          return { prepared: await this.table!.prepare(message.plan) };
        });
        return;
      case 'commit':
        this.reloadStep(message.requestId, async () => {
          // Test hook: hold the window between a successful prepare and the commit open.
          const delayMs = testDelayMs('COMMIT_DELAY_MS');
          if (this.options?.testHooks && delayMs > 0)
            await new Promise((resolve) => setTimeout(resolve, delayMs));
          this.table!.commit(message.plan, message.epoch);
          await this.applySettings(message.plan.settings);
          this.logger.info({ epoch: message.epoch }, 'model table committed');
          return { epoch: message.epoch };
        });
        return;
      case 'abort':
        this.reloadStep(message.requestId, async () => {
          await this.table!.abort();
          return {};
        });
        return;
      case 'release':
        this.reloadStep(message.requestId, async () => ({
          released: await this.table!.release(message.plan),
        }));
        return;
      case 'roll':
        this.reloadStep(message.requestId, async () => {
          // This node stops taking new connections while it swaps; the other nodes serve them.
          this.gateway!.stopListening();
          try {
            await this.table!.rollInPlace(message.plan, message.epoch);
            await this.applySettings(message.plan.settings);
          } finally {
            await this.gateway!.resumeListening();
          }
          return { epoch: message.epoch };
        });
        return;
      case 'ping':
        send({ type: 'pong', seq: message.seq, answered: this.gateway?.answers.answered ?? 0 });
        return;
      case 'block':
        if (this.options?.testHooks) {
          this.logger.warn({ ms: message.ms }, 'test hook: blocking the event loop');
          // Blocks this thread without burning a core (Atomics.wait is allowed on Node's main thread).
          Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, message.ms);
        }
        return;
      case 'tenant-shares': {
        const tenants = this.gateway?.tenants;
        tenants?.applyShares(message.shares);
        send({ type: 'tenant-report', seq: message.seq, tenants: tenants?.report() ?? {} });
        return;
      }
      case 'fence':
        if (this.gateway) this.gateway.admission.fence = message.reason ?? undefined;
        if (message.reason) this.logger.warn({ reason: message.reason }, 'fenced from the fleet');
        else this.logger.info('fence lifted');
        return;
      case 'shutdown':
        void this.shutdown();
        return;
    }
  }

  /**
   * Control requests (probes, /metrics with metricsOnDataPort) still waiting for the supervisor when this node
   * goes away get an answer rather than a dropped connection.
   */
  private refuseControlWaiters(): void {
    for (const [requestId, reply] of this.controlWaiters) {
      this.controlWaiters.delete(requestId);
      reply({
        status: httpStatusOf('unavailable'),
        contentType: 'application/json',
        body: encodeError(null, 'unavailable', 'this node stopped before the supervisor answered; ask again'),
      });
    }
  }

  shutdown(): Promise<void> {
    this.shuttingDown ??= this.drain();
    return this.shuttingDown;
  }

  private async drain(): Promise<void> {
    this.state = 'draining';
    const gateway = this.gateway;
    const timeoutMs = this.options?.shutdownTimeoutMs ?? 30000;
    let abandoned = 0;
    let answered = 0;
    if (gateway) {
      gateway.stopAccepting();
      this.logger.info(
        { inflight: gateway.pending.size },
        'draining: listen socket closed, finishing admitted requests',
      );
      abandoned = await gateway.answers.waitForIdle(timeoutMs);
      answered = gateway.answers.answered;
      this.refuseControlWaiters();
      gateway.closeConnections();
    }
    if (this.threads) await this.threads.drain();
    this.logger.info({ answered, abandoned }, 'node drained');
    send({ type: 'drained', nodeIndex: this.options?.nodeIndex ?? -1, answered, abandoned });
    setTimeout(() => process.exit(0), 50);
  }
}

/**
 * What a configuration reload changes in the options this node runs with. The WebSocket layer's frame and
 * buffer caps and the slow-consumer thresholds are fixed at start: the supervisor never changes those here
 * (it reports them as needing a restart). Requests already admitted keep their deadline.
 */
function applyToOptions(options: NodeStartOptions, settings: NodeSettings): void {
  options.batch = settings.batch;
  options.maxPayloadBytes = settings.maxPayloadBytes;
  options.requestTimeoutMs = settings.requestTimeoutMs;
  options.shutdownTimeoutMs = settings.shutdownTimeoutMs;
  options.logLevel = settings.logLevel;
  // Absent: no API keys file (anonymous traffic).
  if (settings.tenants) options.tenants = settings.tenants;
  else delete options.tenants;
  options.backpressure = {
    ...settings.backpressure,
    slowConsumerWarnBytes: options.backpressure.slowConsumerWarnBytes,
    slowConsumerCloseBytes: options.backpressure.slowConsumerCloseBytes,
  };
}

/** JSON with object keys sorted, so equal settings compare equal whatever order they were built in. */
function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_key, field: unknown) =>
    typeof field === 'object' && field !== null && !Array.isArray(field)
      ? Object.fromEntries(Object.entries(field).sort(([a], [b]) => (a < b ? -1 : 1)))
      : field,
  );
}

const node = new NodeProcess();
process.on('message', (message: SupervisorMessage, handle?: unknown) => node.onMessage(message, handle));
// Under systemd a SIGTERM may reach every process of the unit: drain the same way the supervisor asks.
process.on('SIGTERM', () => void node.shutdown());
process.on('SIGINT', () => void node.shutdown());
// If the supervisor goes away, do not linger as an orphan.
process.on('disconnect', () => void node.shutdown());
