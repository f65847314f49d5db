/**
 * The supervisor: control plane of one host. Forks the node processes, forwards nothing of the request path,
 * answers control requests that any node receives on the data port (health, metrics, admin API) for the whole
 * host, restarts a crashed node with backoff, and drains everything on SIGTERM.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { createServer } from 'node:net';
import * as path from 'node:path';
import type { Logger } from 'pino';
import { collectDefaultMetrics, Registry } from 'prom-client';
import type { ServerConfig } from '../../libs/config';
import { defaultIntraOpThreads } from '../../libs/inference';
import type { MetricJson } from '../../libs/metrics';
import { aggregateToText, PROMETHEUS_CONTENT_TYPE } from '../../libs/metrics';
import { type ErrorCode, encodeError, httpStatusOf } from '../../libs/protocol';
import type {
  ControlRequest,
  ControlResponse,
  NodeHealth,
  NodeMessage,
  NodeStartOptions,
  SupervisorMessage,
} from '../node/ipc';
import { authorizeAdmin } from './admin-auth';

const COLLECT_TIMEOUT_MS = 5000;
const START_TIMEOUT_MS = 120000;

interface NodeHandle {
  index: number;
  child: ChildProcess;
  ready: boolean;
  restarts: number;
  lastHealth: NodeHealth | undefined;
}

export interface SupervisorOptions {
  config: ServerConfig;
  explicitBatchSize: boolean;
  explicitBatchTimeout: boolean;
  testHooks: boolean;
  cores: number;
}

export class Supervisor {
  private readonly nodes: NodeHandle[] = [];
  private port = 0;
  private stopping = false;
  private readonly waiters = new Map<number, (message: NodeMessage) => void>();
  private nextRequestId = 1;
  private readonly registry = new Registry();
  private defaultModel: string;
  private readonly startedAt = Date.now();

  constructor(
    private readonly options: SupervisorOptions,
    private readonly logger: Logger,
  ) {
    collectDefaultMetrics({ register: this.registry, prefix: 'streaminfer_supervisor_' });
    this.defaultModel = options.config.defaultModel;
  }

  get listeningPort(): number {
    return this.port;
  }

  private startOptions(index: number): NodeStartOptions {
    const config = this.options.config;
    return {
      nodeIndex: index,
      port: this.port,
      host: config.host,
      device: config.device,
      workers: config.workers,
      intraOpThreads:
        config.intraOpThreads ?? defaultIntraOpThreads(this.options.cores, config.workers, config.nodes),
      modelsDir: path.resolve(config.modelsDir),
      defaultModel: this.defaultModel,
      batch: {
        policy: config.batchPolicy,
        maxBatchSize: config.batchSize,
        maxQueueDelayMs: config.batchTimeoutMs,
        explicitSize: this.options.explicitBatchSize,
        explicitTimeout: this.options.explicitBatchTimeout,
      },
      maxPayloadBytes: config.maxPayloadBytes,
      requestTimeoutMs: config.requestTimeoutMs,
      backpressure: {
        rateLimitRps: config.rateLimitRps,
        rateLimitBurst: config.rateLimitBurst,
        maxInflightPerClient: config.maxQueueSize,
        maxModelQueue: config.maxModelQueue,
        slowConsumerWarnBytes: config.slowConsumerWarnBytes,
        slowConsumerCloseBytes: config.slowConsumerCloseBytes,
        trustForwardedFor: config.trustForwardedFor,
      },
      ringBytes: config.ringBytes,
      shutdownTimeoutMs: config.shutdownTimeoutMs,
      logLevel: config.logLevel,
      testHooks: this.options.testHooks,
    };
  }

  /** Starts node 0 first (it may pick the port when --port 0), then the others on the same port. */
  async start(): Promise<number> {
    this.port = this.options.config.port;
    // A port picked by the kernel (port 0) is not shared through SO_REUSEPORT: pick one for all nodes first.
    if (this.port === 0 && this.options.config.nodes > 1)
      this.port = await pickFreePort(this.options.config.host);
    await this.startNode(0, 0);
    await Promise.all(
      Array.from({ length: this.options.config.nodes - 1 }, (_, i) => this.startNode(i + 1, 0)),
    );
    return this.port;
  }

  private startNode(index: number, restarts: number): Promise<void> {
    // STREAMINFER_NODE_ARGS passes extra Node flags to node processes (profiling: "--cpu-prof --cpu-prof-dir=/tmp/p").
    const extraArgs = process.env.STREAMINFER_NODE_ARGS?.split(/\s+/).filter(Boolean) ?? [];
    const child = fork(path.join(__dirname, '../node/main.js'), [], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      serialization: 'advanced',
      execArgv: [...process.execArgv, ...extraArgs],
    });
    const handle: NodeHandle = { index, child, ready: false, restarts, lastHealth: undefined };
    this.nodes[index] = handle;
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`node ${index} did not become ready within ${START_TIMEOUT_MS / 1000}s`)),
        START_TIMEOUT_MS,
      );
      child.on('message', (message: NodeMessage) => {
        switch (message.type) {
          case 'listening':
            if (this.port === 0) this.port = message.port;
            return;
          case 'ready':
            handle.ready = true;
            handle.lastHealth = message.health;
            clearTimeout(timer);
            resolve();
            return;
          case 'start-failed':
            clearTimeout(timer);
            reject(new Error(`node ${index} failed to start: ${message.error}`));
            return;
          default:
            this.onNodeMessage(handle, message);
        }
      });
      child.on('exit', (code, signal) => {
        clearTimeout(timer);
        handle.ready = false;
        if (this.nodes[index] !== handle) return;
        if (this.stopping) return;
        reject(new Error(`node ${index} exited during start (code ${code}, signal ${signal})`));
        this.logger.error({ node: index, code, signal }, 'node exited; restarting');
        const delay = Math.min(10000, 250 * 2 ** Math.min(handle.restarts, 6));
        setTimeout(() => {
          if (this.stopping) return;
          this.startNode(index, handle.restarts + 1).then(
            () => this.logger.info({ node: index }, 'node restarted'),
            (error: Error) => this.logger.error({ node: index, err: error.message }, 'node restart failed'),
          );
        }, delay).unref();
      });
      child.send({ type: 'start', options: this.startOptions(index) } satisfies SupervisorMessage);
    });
  }

  private onNodeMessage(handle: NodeHandle, message: NodeMessage): void {
    switch (message.type) {
      case 'control-request':
        this.handleControl(message.request).then(
          (response) =>
            this.sendTo(handle, { type: 'control-response', requestId: message.requestId, response }),
          (error: Error) =>
            this.sendTo(handle, {
              type: 'control-response',
              requestId: message.requestId,
              response: jsonError('internal', error.message),
            }),
        );
        return;
      case 'collected':
      case 'command-result': {
        const waiter = this.waiters.get(message.requestId);
        this.waiters.delete(message.requestId);
        waiter?.(message);
        return;
      }
      case 'drained':
        this.logger.info(
          { node: message.nodeIndex, answered: message.answered, abandoned: message.abandoned },
          'node drained',
        );
        return;
      default:
        return;
    }
  }

  private sendTo(handle: NodeHandle, message: SupervisorMessage): void {
    if (handle.child.connected) handle.child.send(message);
  }

  /** Asks one node and waits for its answer (or a timeout). */
  private ask(
    handle: NodeHandle,
    build: (requestId: number) => SupervisorMessage,
  ): Promise<NodeMessage | undefined> {
    const requestId = this.nextRequestId++;
    return new Promise((resolve) => {
      if (!handle.child.connected) {
        resolve(undefined);
        return;
      }
      const timer = setTimeout(() => {
        this.waiters.delete(requestId);
        resolve(undefined);
      }, COLLECT_TIMEOUT_MS);
      this.waiters.set(requestId, (message) => {
        clearTimeout(timer);
        resolve(message);
      });
      handle.child.send(build(requestId));
    });
  }

  private async collect(what: 'metrics' | 'health'): Promise<Array<NodeMessage | undefined>> {
    return Promise.all(
      this.nodes.map((handle) => this.ask(handle, (requestId) => ({ type: 'collect', requestId, what }))),
    );
  }

  async healthReport(): Promise<{ ready: boolean; body: Record<string, unknown> }> {
    const answers = await this.collect('health');
    const nodes = answers.map((answer, index) => {
      const health = answer?.type === 'collected' ? answer.health : undefined;
      if (health) this.nodes[index]!.lastHealth = health;
      return health;
    });
    const ready =
      !this.stopping &&
      nodes.length === this.options.config.nodes &&
      nodes.every(
        (node) => node !== undefined && node.state === 'ready' && node.workersReady === node.workers,
      );
    const first = nodes.find((node) => node !== undefined);
    const body = {
      status: this.stopping ? 'draining' : ready ? 'ok' : 'starting',
      ready,
      uptime_s: Math.round((Date.now() - this.startedAt) / 1000),
      default_model: first?.defaultModel ?? this.defaultModel,
      device: this.options.config.device,
      epoch: first?.epoch ?? 0,
      nodes: nodes.map((node, index) =>
        node
          ? {
              node: index,
              pid: node.pid,
              state: node.state,
              workers: node.workers,
              workers_ready: node.workersReady,
              inflight: node.inflight,
              ws_connections: node.wsConnections,
            }
          : { node: index, state: 'unreachable' },
      ),
      models: (first?.models ?? []).map((model) => ({
        name: model.name,
        default_version: model.defaultVersion,
        versions: model.versions.map((version) => ({
          version: version.version,
          execution_provider: version.executionProvider,
          loaded_workers: version.loadedWorkers,
          ...(version.fallbackReason ? { fallback_reason: version.fallbackReason } : {}),
        })),
      })),
    };
    return { ready, body };
  }

  private async metricsText(): Promise<string> {
    const answers = await this.collect('metrics');
    const perProcess: MetricJson[][] = [];
    for (const answer of answers)
      if (answer?.type === 'collected' && answer.metrics) perProcess.push(answer.metrics);
    perProcess.push((await this.registry.getMetricsAsJSON()) as unknown as MetricJson[]);
    return aggregateToText(perProcess);
  }

  private async broadcast(
    build: (requestId: number) => SupervisorMessage,
  ): Promise<{ ok: boolean; errors: string[] }> {
    const answers = await Promise.all(this.nodes.map((handle) => this.ask(handle, build)));
    const errors: string[] = [];
    answers.forEach((answer, index) => {
      if (!answer) errors.push(`node ${index} did not answer`);
      else if (answer.type === 'command-result' && !answer.ok) errors.push(`node ${index}: ${answer.error}`);
    });
    return { ok: errors.length === 0, errors };
  }

  /** Switches the model that requests without a "model" field go to, on every node. */
  async setDefaultModel(model: string): Promise<ControlResponse> {
    const previous = this.defaultModel;
    const result = await this.broadcast((requestId) => ({ type: 'set-default-model', requestId, model }));
    if (!result.ok) {
      // Put back any node that already switched, so the host never serves two defaults.
      await this.broadcast((requestId) => ({ type: 'set-default-model', requestId, model: previous }));
      const unknown = result.errors.some((error) => error.includes('unknown model'));
      return jsonError(unknown ? 'unknown_model' : 'internal', result.errors.join('; '));
    }
    this.defaultModel = model;
    this.logger.info({ from: previous, to: model }, 'default model switched');
    return json(200, { ok: true, default_model: model, previous });
  }

  async handleControl(request: ControlRequest): Promise<ControlResponse> {
    const { method, path: url } = request;
    if (url === '/health' || url === '/v2/health/ready') {
      const report = await this.healthReport();
      return json(report.ready ? 200 : 503, url === '/health' ? report.body : { ready: report.ready });
    }
    if (url === '/v2/health/live') return json(200, { live: true });
    if (url === '/metrics') {
      if (method !== 'GET') return jsonError('method_not_allowed', 'use GET /metrics');
      return { status: 200, contentType: PROMETHEUS_CONTENT_TYPE, body: await this.metricsText() };
    }
    if (url.startsWith('/api/')) {
      const auth = authorizeAdmin(
        this.options.config.adminToken,
        request.remoteAddress,
        request.authorization,
      );
      if (!auth.ok) return jsonError('unauthorized', auth.reason);
      return this.handleAdmin(request);
    }
    return jsonError('not_found', `no route for ${method} ${url}`);
  }

  private async handleAdmin(request: ControlRequest): Promise<ControlResponse> {
    const { method, path: url } = request;
    let body: Record<string, unknown> = {};
    if (request.body.trim().length > 0) {
      try {
        const parsed: unknown = JSON.parse(request.body);
        if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
          return jsonError('bad_request', 'body must be a JSON object');
        body = parsed as Record<string, unknown>;
      } catch {
        return jsonError('bad_request', 'malformed JSON body');
      }
    }
    if (url === '/api/reload') {
      if (method !== 'POST') return jsonError('method_not_allowed', 'use POST /api/reload');
      if (body.model === undefined)
        return json(200, { ok: true, default_model: this.defaultModel, changed: false });
      if (typeof body.model !== 'string' || body.model.length === 0)
        return jsonError('bad_request', '"model" must be a model name');
      return this.setDefaultModel(body.model);
    }
    if (url === '/api/models' && method === 'GET') {
      const report = await this.healthReport();
      return json(200, { default_model: report.body.default_model, models: report.body.models });
    }
    if (url === '/api/debug/crash-worker' && method === 'POST') {
      if (!this.options.testHooks) return jsonError('not_found', 'test hooks are disabled');
      const node = this.nodes[Number(body.node ?? 0)];
      if (!node) return jsonError('bad_request', 'no such node');
      const answer = await this.ask(node, (requestId) => ({
        type: 'crash-worker',
        requestId,
        workerIndex: Number(body.worker ?? 0),
      }));
      return answer?.type === 'command-result' && answer.ok
        ? json(200, { ok: true })
        : jsonError('bad_request', 'no such worker');
    }
    return jsonError('not_found', `no admin route for ${method} ${url}`);
  }

  nodePids(): number[] {
    return this.nodes.map((handle) => handle.child.pid ?? -1);
  }

  /** SIGTERM: every node stops accepting, answers what it admitted, exits; then the supervisor exits. */
  async shutdown(): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    this.logger.info('shutting down: draining nodes');
    const grace = this.options.config.shutdownTimeoutMs + 10000;
    await Promise.all(
      this.nodes.map(
        (handle) =>
          new Promise<void>((resolve) => {
            if (handle.child.exitCode !== null || handle.child.signalCode !== null) {
              resolve();
              return;
            }
            const timer = setTimeout(() => {
              this.logger.error({ node: handle.index }, 'node did not drain in time; killing it');
              handle.child.kill('SIGKILL');
            }, grace);
            handle.child.once('exit', () => {
              clearTimeout(timer);
              resolve();
            });
            this.sendTo(handle, { type: 'shutdown' });
          }),
      ),
    );
    this.logger.info('all nodes stopped');
  }
}

function pickFreePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, host, () => {
      const address = server.address();
      server.close(() =>
        typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port')),
      );
    });
  });
}

function json(status: number, body: unknown): ControlResponse {
  return { status, contentType: 'application/json', body: JSON.stringify(body) };
}

function jsonError(code: ErrorCode, message: string): ControlResponse {
  return {
    status: httpStatusOf(code),
    contentType: 'application/json',
    body: encodeError(null, code, message),
  };
}
