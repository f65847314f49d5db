/**
 * The host's control answers. On the admin listener (libs/admin, which it binds): health and readiness
 * probes, metrics (every process aggregated), and the admin API under /api/: reloads, registry actions,
 * rollouts (rollout-controller.ts), the model list, and the test hooks; /api/* and /metrics pass
 * checkAdminRequest first (the token when one is configured). From a node's data port: the probes only, and
 * /metrics with metricsOnDataPort. It shapes outcomes and typed errors into responses; what a reload does is
 * the supervisor's.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Counter, type Registry } from 'prom-client';
import {
  type AdminAddress,
  type AdminEndpoint,
  AdminListener,
  type AdminPolicy,
  type AdminSecrets,
  checkAdminRequest,
  readAdminSecrets,
  readRequestBody,
  requestHead,
  sendText,
  type TlsPair,
} from '../../../libs/admin';
import type { ServerConfig } from '../../../libs/config';
import type { MetricJson } from '../../../libs/metrics';
import { aggregateToText, metricJson, PROMETHEUS_CONTENT_TYPE } from '../../../libs/metrics';
import { decodePathSegment } from '../../../libs/protocol';
import {
  type ModelPlan,
  REGISTRY_ACTIONS,
  type RegistryAction,
  type UnavailableModel,
} from '../../../libs/registry';
import type { ControlRequest, ControlResponse } from '../../node/ipc';
import { Coalescer } from '../coalesce';
import type { ReloadOutcome, ReloadStrategy } from '../coordinator';
import { FAILABLE_STEPS, type NodeSet } from '../node-set';
import type { RolloutAction } from '../rollout/rollout-controller';
import {
  IF_REVISION_RULE,
  ifRevisionOf,
  json,
  jsonError,
  modelView,
  outcomeBody,
  outcomeResponse,
  respond,
} from './responses';

/** Scrapes of one kind start node fan-outs at least this far apart (concurrent scrapes share them). */
const SCRAPE_MIN_INTERVAL_MS = 50;

const REGISTRY_ROUTE = new RegExp(`^/api/models/([^/]+)/(${REGISTRY_ACTIONS.join('|')})$`);
/** Progressive delivery: GET / POST …/rollout, POST …/rollout/{pause,resume,abort}. */
const ROLLOUT_ROUTE = /^\/api\/models\/([^/]+)\/rollout(?:\/(pause|resume|abort))?$/;
const FLEET_EXCLUDE_ROUTE = /^\/api\/fleet\/hosts\/([^/]+)\/exclude$/;

export interface ReloadRequest {
  model?: string;
  version?: string;
  strategy?: ReloadStrategy;
  /** In a fleet: refuse (409 conflict) unless the registry record is still at this revision. */
  ifRevision?: number;
}

/** The admin listener's secrets as read from their files (or the token from the environment or a flag). */
/**
 * Reads the admin token file and TLS files a configuration names (at start, and on every configuration
 * reload, so a rotated token or certificate is picked up). Throws AdminSetupError naming the file.
 */
export function serverAdminSecrets(config: ServerConfig, warn: (message: string) => void): AdminSecrets {
  const secrets = readAdminSecrets(
    {
      tokenFile: config.adminTokenFile,
      token: config.adminToken,
      ...(config.adminTlsCert !== undefined ? { tlsCert: config.adminTlsCert } : {}),
      ...(config.adminTlsKey !== undefined ? { tlsKey: config.adminTlsKey } : {}),
    },
    warn,
  );
  if (config.adminTokenFile !== undefined && secrets.token !== undefined && secrets.token.length < 16)
    warn(
      `the admin token in ${config.adminTokenFile} is shorter than 16 characters: use a long random token`,
    );
  return secrets;
}

/** Where a control request arrived: the admin listener, or a node's data port. */
export type ControlPlane = 'admin' | 'data';

/** What the admin API asks of the host (the supervisor). Reloads throw ProtocolError or ReloadBusyError. */
export interface AdminHost {
  /** The configuration in force (a configuration reload replaces it). */
  readonly config: ServerConfig;
  /** The token in force and the allowed web origins (a configuration reload replaces them). */
  readonly adminPolicy: AdminPolicy;
  readonly testHooks: boolean;
  /** The default model the host serves, for the health report before any node answers. */
  readonly defaultModel: string;
  readonly lastReload: ReloadOutcome | undefined;
  reload(request: ReloadRequest, reason: string): Promise<ReloadOutcome>;
  /** What this host's repository holds that did not load (health says `degraded`, with each reason). */
  readonly unavailable: readonly UnavailableModel[];
  reloadConfig(
    file: unknown,
    filePath: string | undefined,
    reason: string,
    strategy?: ReloadStrategy,
  ): Promise<ReloadOutcome>;
  /** `ifRevision`: in a fleet, refused 409 conflict unless the registry record is still at it. */
  changeRegistry(
    name: string,
    action: RegistryAction,
    body: Record<string, unknown>,
    ifRevision?: number,
  ): Promise<{ outcome: ReloadOutcome; model: ModelPlan }>;
}

/** The fleet routes and health fields of the admin API (a host alone: not_found, and nothing in health). */
export interface FleetAdmin {
  /** Why the host is fenced from its fleet (not ready, refusing traffic), while it is. */
  readonly fence: string | undefined;
  /** Why the host serves an older table than its fleet's record (degraded, still serving), while it does. */
  readonly behind: string | undefined;
  /** The fleet and this host's id in it, in a fleet. */
  readonly fleet: { name: string; host: string } | undefined;
  /** GET /api/fleet; ProtocolError not_found when the host is not in a fleet, cluster_unavailable without NATS. */
  view(): Promise<unknown>;
  /** POST /api/fleet/hosts/{host}/exclude: take a (silent) member out of the fleet's members. */
  exclude(host: string): Promise<unknown>;
}

/** Progressive delivery (rollout-controller.ts): the answer body, or a ProtocolError. */
export interface RolloutAdmin {
  handle(model: string, action: RolloutAction, body: Record<string, unknown>): Promise<unknown>;
}

export interface HealthReport {
  ready: boolean;
  body: Record<string, unknown>;
}

export class AdminApi {
  private readonly startedAt = Date.now();
  private readonly healthScrapes = new Coalescer(() => this.buildHealthReport(), SCRAPE_MIN_INTERVAL_MS);
  private readonly metricsScrapes = new Coalescer(() => this.buildMetricsText(), SCRAPE_MIN_INTERVAL_MS);
  private readonly adminRequestsTotal: Counter;
  private readonly adminRefusedTotal: Counter<'code'>;
  /** The admin listener (/api/*, /metrics, /health), bound by listen(). */
  private listener: AdminListener | undefined;
  private bound: AdminAddress | undefined;

  constructor(
    private readonly host: AdminHost,
    private readonly fleet: FleetAdmin,
    private readonly rollouts: RolloutAdmin,
    private readonly nodeSet: NodeSet,
    /** The supervisor's own metrics, appended to the nodes'. */
    private readonly registry: Registry,
    private readonly fanOutsTotal: Counter<'what'>,
  ) {
    this.adminRequestsTotal = new Counter({
      name: 'streaminfer_admin_requests_total',
      help: "Admin API requests (/api/*) that passed the admin listener's checks (refused ones: streaminfer_admin_refused_total).",
      registers: [registry],
    });
    this.adminRefusedTotal = new Counter({
      name: 'streaminfer_admin_refused_total',
      help: 'Requests for /api/* and /metrics the admin listener refused from their headers, before reading a body: unauthorized, forbidden (Host or Origin), unsupported_media_type.',
      labelNames: ['code'],
      registers: [registry],
    });
    for (const code of ['unauthorized', 'forbidden', 'unsupported_media_type'])
      this.adminRefusedTotal.inc({ code }, 0);
  }

  /** Binds the admin listener; a taken address fails (the host's start). */
  async listen(endpoint: AdminEndpoint, tls: TlsPair | undefined): Promise<void> {
    this.listener = new AdminListener(endpoint, (req, res) => this.serveHttp(req, res), tls);
    this.bound = await this.listener.listen();
  }

  /** Where the admin listener listens (once bound). */
  get address(): AdminAddress | undefined {
    return this.bound;
  }

  /** A rotated certificate for new connections (open ones keep theirs). */
  useTls(pair: TlsPair): void {
    this.listener?.useTls(pair);
  }

  async close(): Promise<void> {
    await this.listener?.close();
  }

  /**
   * One request on the admin listener. /api/* and /metrics are decided from their headers first
   * (checkAdminRequest): a refusal is answered without reading the body (the connection is closed).
   */
  serveHttp(req: IncomingMessage, res: ServerResponse): void {
    this.serveAdmin(req, res).catch((error: Error) => {
      const failed = jsonError('internal', error.message);
      sendText(res, failed.status, failed.contentType, failed.body, { close: true });
    });
  }

  private async serveAdmin(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const target = req.url ?? '/';
    const mark = target.indexOf('?');
    const path = mark < 0 ? target : target.slice(0, mark);
    const head = requestHead(req);
    const mutating = head.method !== 'GET' && head.method !== 'HEAD';
    if (path.startsWith('/api/') || path === '/metrics') {
      const decision = checkAdminRequest(this.host.adminPolicy, head);
      if (!decision.ok) {
        this.adminRefusedTotal.inc({ code: decision.code });
        const refused = jsonError(decision.code, decision.reason);
        sendText(res, refused.status, refused.contentType, refused.body, { close: mutating });
        return;
      }
    }
    let body = '';
    if (mutating) {
      const text = await readRequestBody(req, this.host.config.maxPayloadBytes);
      if (text === undefined) {
        const tooLarge = jsonError('payload_too_large', 'admin request body too large');
        sendText(res, tooLarge.status, tooLarge.contentType, tooLarge.body, { close: true });
        return;
      }
      body = text;
    }
    const query = mark < 0 ? '' : target.slice(mark + 1);
    const response = await this.answer({ method: head.method, path, query, body }, 'admin');
    sendText(
      res,
      response.status,
      response.contentType,
      response.body,
      response.headers ? { headers: response.headers } : {},
    );
  }

  /** A control request from the admin listener or a node; never rejects (an unexpected error is a 500 `internal`). */
  answer(request: ControlRequest, plane: ControlPlane): Promise<ControlResponse> {
    return this.handleControl(request, plane).catch((error: Error) => jsonError('internal', error.message));
  }

  async handleControl(request: ControlRequest, plane: ControlPlane): Promise<ControlResponse> {
    const { method, path: url } = request;
    // The data port serves inference, health and readiness; the admin API only ever on the admin listener.
    const adminOnly = url.startsWith('/api/') || (url === '/metrics' && !this.host.config.metricsOnDataPort);
    if (plane === 'data' && adminOnly) return jsonError('not_found', `no route for ${method} ${url}`);
    const probe = url === '/health' || url === '/v2/health/ready' || url === '/v2/health/live';
    if (probe && method !== 'GET' && method !== 'HEAD')
      return jsonError('method_not_allowed', `use GET ${url}`);
    if (url === '/health' || url === '/v2/health/ready') {
      const report = await this.healthReport();
      return json(report.ready ? 200 : 503, url === '/health' ? report.body : { ready: report.ready });
    }
    if (url === '/v2/health/live') return json(200, { live: true });
    if (url === '/metrics') {
      if (method !== 'GET') return jsonError('method_not_allowed', 'use GET /metrics');
      return { status: 200, contentType: PROMETHEUS_CONTENT_TYPE, body: await this.metricsScrapes.get() };
    }
    if (url.startsWith('/api/')) {
      this.adminRequestsTotal.inc();
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
    if (url === '/api/reload') return this.reloadRoute(method, body);
    if (url === '/api/fleet') {
      if (method !== 'GET') return jsonError('method_not_allowed', 'use GET /api/fleet');
      return respond(async () => json(200, await this.fleet.view()));
    }
    const exclude = FLEET_EXCLUDE_ROUTE.exec(url);
    if (exclude) {
      if (method !== 'POST') return jsonError('method_not_allowed', `use POST ${url}`);
      const host = decodePathSegment(exclude[1]);
      if (host === undefined)
        return jsonError('bad_request', 'malformed percent-escape in the host id of the path');
      return respond(async () => json(200, await this.fleet.exclude(host)));
    }
    const rollout = ROLLOUT_ROUTE.exec(url);
    if (rollout) {
      const model = decodePathSegment(rollout[1]);
      if (model === undefined)
        return jsonError('bad_request', 'malformed percent-escape in the model name of the path');
      const operation = rollout[2] as 'pause' | 'resume' | 'abort' | undefined;
      if (operation !== undefined && method !== 'POST')
        return jsonError('method_not_allowed', `use POST ${url}`);
      if (operation === undefined && method !== 'GET' && method !== 'POST')
        return jsonError('method_not_allowed', `use GET or POST ${url}`);
      const action: RolloutAction = operation ?? (method === 'GET' ? 'get' : 'start');
      return respond(async () => json(200, await this.rollouts.handle(model, action, body)));
    }
    const registry = REGISTRY_ROUTE.exec(url);
    if (registry) {
      if (method !== 'POST') return jsonError('method_not_allowed', `use POST ${url}`);
      const model = decodePathSegment(registry[1]);
      if (model === undefined)
        return jsonError('bad_request', 'malformed percent-escape in the model name of the path');
      const ifRevision = ifRevisionOf(body);
      if (ifRevision === null) return jsonError('bad_request', IF_REVISION_RULE);
      return respond(async () => {
        const { outcome, model: next } = await this.host.changeRegistry(
          model,
          registry[2] as RegistryAction,
          body,
          ifRevision,
        );
        return outcomeResponse(outcome, { model: modelView(next) });
      });
    }
    if (url === '/api/models' && method === 'GET') {
      const report = await this.healthReport();
      return json(200, { default_model: report.body.default_model, models: report.body.models });
    }
    if (url.startsWith('/api/debug/') && method === 'POST') return this.debugRoute(url, method, body);
    return jsonError('not_found', `no admin route for ${method} ${url}`);
  }

  /** POST /api/reload (a model reload, or a configuration reload with "config"); GET shows the last outcome. */
  private reloadRoute(
    method: string,
    body: Record<string, unknown>,
  ): Promise<ControlResponse> | ControlResponse {
    const last = this.host.lastReload;
    if (method === 'GET') return json(200, last ? outcomeBody(last) : { id: 0 });
    if (method !== 'POST')
      return jsonError('method_not_allowed', 'use POST /api/reload (GET shows the last outcome)');
    for (const field of ['model', 'version', 'strategy'] as const) {
      const value = body[field];
      if (value !== undefined && (typeof value !== 'string' || value.length === 0))
        return jsonError('bad_request', `"${field}" must be a non-empty string`);
    }
    if (body.version !== undefined && body.model === undefined)
      return jsonError('bad_request', '"version" needs "model"');
    if (body.config !== undefined) {
      if (typeof body.config !== 'object' || body.config === null || Array.isArray(body.config))
        return jsonError('bad_request', '"config" must be an object of settings (a config file\'s content)');
      if (body.model !== undefined)
        return jsonError('bad_request', '"config" re-reads everything; it takes no "model" or "version"');
    }
    if (body.strategy !== undefined && body.strategy !== 'atomic' && body.strategy !== 'rolling') {
      return jsonError('bad_request', '"strategy" must be "atomic" or "rolling"');
    }
    const request: ReloadRequest = {};
    if (typeof body.model === 'string') request.model = body.model;
    if (typeof body.version === 'string') request.version = body.version;
    if (typeof body.strategy === 'string') request.strategy = body.strategy as ReloadStrategy;
    const ifRevision = ifRevisionOf(body);
    if (ifRevision === null) return jsonError('bad_request', IF_REVISION_RULE);
    if (ifRevision !== undefined) request.ifRevision = ifRevision;
    if (body.config !== undefined) {
      const config = body.config;
      return respond(async () =>
        outcomeResponse(
          await this.host.reloadConfig(
            config,
            'sent with POST /api/reload',
            'POST /api/reload (config)',
            request.strategy,
          ),
        ),
      );
    }
    return respond(async () => outcomeResponse(await this.host.reload(request, 'POST /api/reload')));
  }

  /** Test hooks (STREAMINFER_TEST_HOOKS=1): crash a worker, script reload steps to fail, wedge a node. */
  private async debugRoute(
    url: string,
    method: string,
    body: Record<string, unknown>,
  ): Promise<ControlResponse> {
    const known =
      url === '/api/debug/crash-worker' || url === '/api/debug/fail-step' || url === '/api/debug/block-node';
    if (!known) return jsonError('not_found', `no admin route for ${method} ${url}`);
    if (!this.host.testHooks) return jsonError('not_found', 'test hooks are disabled');
    if (url === '/api/debug/block-node') {
      const ms = body.ms;
      if (
        !Number.isInteger(body.node) ||
        !Number.isInteger(ms) ||
        (ms as number) < 1 ||
        (ms as number) > 120000
      )
        return jsonError('bad_request', '"node" must be a node index and "ms" an integer from 1 to 120000');
      return this.nodeSet.blockNode(body.node as number, ms as number)
        ? json(200, { ok: true })
        : jsonError('bad_request', 'no such node');
    }
    if (url === '/api/debug/crash-worker') {
      const node = Number(body.node ?? 0);
      if (!this.nodeSet.nodes[node]) return jsonError('bad_request', 'no such node');
      return (await this.nodeSet.crashWorker(node, Number(body.worker ?? 0)))
        ? json(200, { ok: true })
        : jsonError('bad_request', 'no such worker');
    }
    if (!Number.isInteger(body.node) || typeof body.step !== 'string' || !FAILABLE_STEPS.includes(body.step))
      return jsonError(
        'bad_request',
        `"node" must be a node index and "step" one of ${FAILABLE_STEPS.join(', ')}`,
      );
    this.nodeSet.failStep(body.node as number, body.step, {
      skip: Number(body.skip ?? 0),
      times: Number(body.times ?? 1),
    });
    return json(200, { ok: true });
  }

  /** The host's health; concurrent callers share one fan-out to the nodes (see Coalescer). */
  healthReport(): Promise<HealthReport> {
    return this.healthScrapes.get();
  }

  private async buildHealthReport(): Promise<HealthReport> {
    this.fanOutsTotal.inc({ what: 'health' });
    const answers = await this.nodeSet.collect('health');
    const nodes = answers.map((answer, index) => {
      const health = answer?.type === 'collected' ? answer.health : undefined;
      if (health) this.nodeSet.nodes[index]!.lastHealth = health;
      return health;
    });
    const stopping = this.nodeSet.stopping;
    const config = this.host.config;
    const fence = this.fleet.fence;
    const unavailable = this.host.unavailable;
    const ready =
      !stopping &&
      fence === undefined &&
      nodes.length === config.nodes &&
      nodes.every(
        (node) => node !== undefined && node.state === 'ready' && node.workersReady === node.workers,
      );
    const first = nodes.find((node) => node !== undefined);
    const behind = this.fleet.behind;
    const up = behind !== undefined ? 'degraded' : 'ok';
    const body = {
      status: stopping
        ? 'draining'
        : fence !== undefined
          ? 'fenced'
          : !ready
            ? 'starting'
            : unavailable.length > 0
              ? 'degraded'
              : up,
      ready,
      ...(fence !== undefined ? { fence } : {}),
      ...(behind !== undefined ? { behind } : {}),
      ...(unavailable.length > 0
        ? {
            unavailable: unavailable.map((entry) => ({
              model: entry.model,
              ...(entry.version !== undefined ? { version: entry.version } : {}),
              reason: entry.reason,
            })),
          }
        : {}),
      ...(this.fleet.fleet ? { fleet: this.fleet.fleet } : {}),
      uptime_s: Math.round((Date.now() - this.startedAt) / 1000),
      default_model: first?.defaultModel ?? this.host.defaultModel,
      device: config.device,
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
        aliases: model.aliases,
        canary_percent: model.canaryPercent,
        shadow: model.shadow,
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

  private async buildMetricsText(): Promise<string> {
    this.fanOutsTotal.inc({ what: 'metrics' });
    const answers = await this.nodeSet.collect('metrics');
    const perProcess: MetricJson[][] = [];
    for (const answer of answers)
      if (answer?.type === 'collected' && answer.metrics) perProcess.push(answer.metrics);
    perProcess.push(
      (await this.registry.getMetricsAsJSON()) as unknown as MetricJson[],
      this.nodeSetMetrics(),
    );
    return aggregateToText(perProcess);
  }

  /**
   * What only the supervisor knows about its nodes, read at scrape time: readiness ("up but not ready" is a
   * node down or out of step while /metrics still answers through another) and restarts per node slot (a
   * crash loop). Ready = at the host's table and epoch and listening, the node set's view /health also rests on.
   */
  private nodeSetMetrics(): MetricJson[] {
    const expected = this.host.config.nodes;
    const nodes = Array.from({ length: expected }, (_, index) => this.nodeSet.nodes[index]);
    const ready = !this.nodeSet.stopping && nodes.every((handle) => handle?.ready === true);
    return [
      metricJson('streaminfer_ready', 'Whether every node is ready to serve (1) or not (0).', 'gauge', [
        { value: ready ? 1 : 0, labels: {} },
      ]),
      metricJson(
        'streaminfer_node_ready',
        'Whether this node is at the host table and listening (1) or not (0).',
        'gauge',
        nodes.map((handle, index) => ({ value: handle?.ready ? 1 : 0, labels: { node: index } })),
      ),
      metricJson(
        'streaminfer_node_restarts_total',
        'Node process starts after the first, per node slot (crashes and forced restarts).',
        'counter',
        nodes.map((handle, index) => ({ value: handle?.restarts ?? 0, labels: { node: index } })),
      ),
    ];
  }
}
