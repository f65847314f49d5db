/**
 * Node process (forked by the supervisor): a gateway on the main thread plus a Piscina pool it owns.
 * Started with a 'start' message over IPC; answers control collections; drains on 'shutdown' or SIGTERM.
 */
import { performance } from 'node:perf_hooks';
import pino from 'pino';
import { devicesForNodes, parseDevice } from '../../libs/inference';
import { assertNativeUws } from '../../libs/inference/uws-check';
import { MAX_SLOTS, metricsBufferFor } from '../../libs/metrics';
import { scanRepository } from '../../libs/registry';
import { Doorbell, RingBuffer } from '../../libs/ring';
import { Gateway, UNROUTED_SLOT } from './gateway';
import type { ControlResponse, NodeMessage, NodeStartOptions, SupervisorMessage } from './ipc';
import type { ModelRuntime, SlotRuntime } from './models';
import { batchOptionsFor } from './models';
import { WorkerPool } from './pool';

/** Ring size divisor per priority (low, normal, high): normal traffic gets the full STREAMINFER_RING_BYTES. */
const PRIORITY_RING_SHARE = [4, 1, 4];

function send(message: NodeMessage): void {
  if (process.connected) process.send?.(message);
}

class NodeProcess {
  private gateway: Gateway | undefined;
  private pool: WorkerPool | undefined;
  private metrics: SharedArrayBuffer | undefined;
  private state: 'starting' | 'ready' | 'draining' = 'starting';
  private readonly controlWaiters = new Map<number, (response: ControlResponse) => void>();
  private nextControlId = 1;
  private logger = pino({ base: { component: 'node' } });
  private options: NodeStartOptions | undefined;
  private shuttingDown: Promise<void> | undefined;

  async start(options: NodeStartOptions): Promise<void> {
    this.options = options;
    this.logger = pino({
      level: options.logLevel,
      base: { component: 'node', node: options.nodeIndex, pid: process.pid },
    });
    assertNativeUws();
    const entries = scanRepository(options.modelsDir);
    if (!entries.some((entry) => entry.name === options.defaultModel)) {
      throw new Error(
        `default model "${options.defaultModel}" (STREAMINFER_MODEL_NAME) is not in ${options.modelsDir}; found ${entries.map((entry) => entry.name).join(', ')}`,
      );
    }
    const device =
      devicesForNodes(options.device, options.nodeIndex + 1)[options.nodeIndex] ??
      parseDevice(options.device.split(',')[0]!);
    this.metrics = metricsBufferFor(1 + options.workers);
    const responseRing = RingBuffer.create(options.ringBytes);
    responseRing.setOwnerId(1);
    const models = new Map<string, ModelRuntime>();
    const slots: Array<SlotRuntime | undefined> = [];
    slots[UNROUTED_SLOT] = undefined;
    this.pool = new WorkerPool({
      nodeIndex: options.nodeIndex,
      workers: options.workers,
      device,
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
          for (const runtime of slots)
            for (const ring of runtime?.rings ?? []) ring.forceReleaseLocks(ringOwnerId);
        }
        // Answers already written by the dead worker are delivered first; the rest are failed, never dropped.
        gateway.drainNow();
        let failed = 0;
        for (const requestId of claimed) {
          if (
            gateway.answerWithError(
              requestId,
              'internal',
              `worker ${workerIndex} died while computing this request; retry`,
            )
          )
            failed++;
        }
        this.logger.warn({ worker: workerIndex, failed }, 'answered the requests of a dead worker');
      },
    });
    this.pool.start();
    this.gateway = new Gateway(options, models, slots, responseRing, this.metrics, this.logger, {
      forwardControl: (request, reply) => {
        const requestId = this.nextControlId++;
        this.controlWaiters.set(requestId, reply);
        send({ type: 'control-request', requestId, request });
      },
    });
    this.gateway.startDrainLoop();
    const port = await this.gateway.listen(options.host, options.port);
    send({ type: 'listening', nodeIndex: options.nodeIndex, port });
    let nextSlot = 1;
    const loads: Promise<void>[] = [];
    for (const entry of entries) {
      const runtime: ModelRuntime = { entry, versions: new Map() };
      models.set(entry.name, runtime);
      for (const version of entry.versions) {
        const slot = nextSlot++;
        if (slot >= MAX_SLOTS)
          throw new Error(`more than ${MAX_SLOTS - 1} model versions in ${options.modelsDir}`);
        const rings = PRIORITY_RING_SHARE.map((share) => {
          const ring = RingBuffer.create(Math.max(4096, options.ringBytes / share));
          ring.setOwnerId(1);
          return ring;
        });
        const doorbell = Doorbell.create();
        const batching = batchOptionsFor(entry, options.batch);
        loads.push(
          this.pool
            .loadLane({
              type: 'load',
              slot,
              model: entry.name,
              version: version.version,
              file: version.file,
              signature: entry.signature,
              rings: rings.map((ring) => ring.buffer),
              doorbell: doorbell.buffer,
              batching,
              epoch: 0,
            })
            .then((result) => {
              const slotRuntime: SlotRuntime = {
                slot,
                model: entry,
                version: version.version,
                rings,
                doorbell,
                guard: this.gateway!.newModelGuard(performance.timeOrigin + performance.now()),
                admitted: 0,
                executionProvider: result.executionProvider,
                loadedWorkers: options.workers,
              };
              if (result.fallbackReason) {
                slotRuntime.fallbackReason = result.fallbackReason;
                this.logger.warn(
                  { model: entry.name, version: version.version, reason: result.fallbackReason },
                  'GPU unavailable: running on CPU (--device auto)',
                );
              }
              runtime.versions.set(version.version, slotRuntime);
              slots[slot] = slotRuntime;
              this.logger.info(
                {
                  model: entry.name,
                  version: version.version,
                  provider: result.executionProvider,
                  loadMs: Math.round(result.loadMs),
                },
                'model loaded',
              );
            })
            .catch((error: Error) => {
              throw new Error(`model ${entry.name} version ${version.version}: ${error.message}`);
            }),
        );
      }
    }
    await Promise.all(loads);
    this.state = 'ready';
    send({ type: 'ready', nodeIndex: options.nodeIndex, health: this.health() });
  }

  private health() {
    return this.gateway!.health(
      this.options!.nodeIndex,
      this.state,
      this.pool?.size ?? 0,
      this.pool?.workersAlive() ?? 0,
    );
  }

  onMessage(message: SupervisorMessage): void {
    switch (message.type) {
      case 'start':
        this.start(message.options).catch((error: Error) => {
          this.logger.error({ err: error.message }, 'node failed to start');
          send({ type: 'start-failed', nodeIndex: message.options.nodeIndex, error: error.message });
          setTimeout(() => process.exit(1), 100);
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
        if (message.what === 'metrics')
          send({
            type: 'collected',
            requestId: message.requestId,
            metrics: this.gateway.metricsJson(this.metrics),
          });
        else send({ type: 'collected', requestId: message.requestId, health: this.health() });
        return;
      case 'set-default-model':
        try {
          this.gateway!.setDefaultModel(message.model);
          send({ type: 'command-result', requestId: message.requestId, ok: true });
        } catch (error) {
          send({
            type: 'command-result',
            requestId: message.requestId,
            ok: false,
            error: (error as Error).message,
          });
        }
        return;
      case 'crash-worker': {
        const ok =
          this.options?.testHooks === true &&
          this.pool !== undefined &&
          this.pool.crashWorker(message.workerIndex);
        send({
          type: 'command-result',
          requestId: message.requestId,
          ok,
          error: ok ? undefined : 'test hooks disabled or no such worker',
        });
        return;
      }
      case 'shutdown':
        void this.shutdown();
        return;
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
        { inflight: gateway.inflight },
        'draining: listen socket closed, finishing admitted requests',
      );
      abandoned = await gateway.waitForIdle(timeoutMs);
      answered = gateway.answered;
      gateway.closeConnections();
    }
    if (this.pool) await this.pool.drain();
    this.logger.info({ answered, abandoned }, 'node drained');
    send({ type: 'drained', nodeIndex: this.options?.nodeIndex ?? -1, answered, abandoned });
    setTimeout(() => process.exit(0), 50);
  }
}

const node = new NodeProcess();
process.on('message', (message: SupervisorMessage) => node.onMessage(message));
// Under systemd a SIGTERM may reach every process of the unit: drain the same way the supervisor asks.
process.on('SIGTERM', () => void node.shutdown());
process.on('SIGINT', () => void node.shutdown());
// If the supervisor goes away, do not linger as an orphan.
process.on('disconnect', () => void node.shutdown());
