/**
 * HTTP requests on the data port: inference (`/predict` and the Open Inference Protocol's `/v2/.../infer`),
 * the v2 model metadata and readiness a tenant may read, the tenant of a request from its bearer key, and
 * answers that have no request behind them.
 */
import type * as uWS from 'uWebSockets.js';
import type { MetricsShard } from '../../libs/metrics';
import { encodeError, encodeV2Error, errorCodeIndex } from '../../libs/protocol';
import { sharedClock as clock } from '../../libs/ring';
import { bearerKey } from '../../libs/tenants';
import { type Admission, Rejection, UNROUTED_SLOT } from './admission';
import type { Answers } from './answers';
import type { ClientLimits } from './client-limits';
import { openExchange, readBody, writeJson } from './http-exchange';
import type { NodeStartOptions } from './ipc';
import type { NodeStatus } from './node-status';
import type { Replies } from './reply';
import { PROTOCOL_HTTP } from './request';
import type { TenantState, Tenants } from './tenants';
import type { TransportGuard } from './transport-guard';

const UNAUTHORIZED_CODE = errorCodeIndex('unauthorized');
const FORBIDDEN_CODE = errorCodeIndex('forbidden');

export class HttpRequests {
  constructor(
    private readonly options: NodeStartOptions,
    private readonly admission: Admission,
    private readonly replies: Replies,
    private readonly answers: Answers,
    private readonly status: NodeStatus,
    private readonly clients: ClientLimits,
    private readonly tenants: Tenants,
    private readonly metrics: MetricsShard,
    private readonly guard: TransportGuard,
  ) {}

  /**
   * One HTTP inference request: `/predict` (our JSON) or, with `v2`, the Open Inference Protocol's
   * `/v2/models/{name}[/versions/{v}]/infer`. Same limits and admission as WebSocket requests; the client is
   * its address (behind trusted proxies, the rightmost untrusted X-Forwarded-For hop).
   */
  infer(
    res: uWS.HttpResponse,
    req: uWS.HttpRequest,
    v2: { model: string; version: string | undefined } | undefined,
    route: string,
  ): void {
    const startedAt = clock();
    let tenant: TenantState | undefined;
    if (this.tenants.enabled) {
      tenant = this.tenantOf(res, req, v2 !== undefined);
      if (tenant === undefined) return;
    }
    const exchange = openExchange(res, route, this.guard);
    exchange.tenant = tenant;
    const reply = v2 ? this.replies.httpV2 : this.replies.httpJson;
    const client = this.clients.ofAddress(this.clients.addressOf(res, req), startedAt);
    const declared = Number(req.getHeader('content-length') || '0');
    const tooLarge = (): void =>
      this.answers.reject(exchange, reply, this.admission.bodyTooLarge(client, exchange), startedAt, true);
    if (declared > this.options.maxPayloadBytes) {
      tooLarge();
      return;
    }
    readBody(exchange, route, this.options.maxPayloadBytes, this.guard, (body) => {
      if (body === undefined) {
        tooLarge();
        return;
      }
      const result = v2
        ? this.admission.admitV2(body, v2.model, v2.version, startedAt, reply, exchange, client)
        : this.admission.admitJson(body, startedAt, reply, exchange, client);
      if (result instanceof Rejection) this.answers.reject(exchange, reply, result, startedAt);
    });
  }

  /** `GET /v2/models/{name}[/versions/{v}][/ready]`: a model's metadata or readiness. */
  model(
    res: uWS.HttpResponse,
    req: uWS.HttpRequest,
    name: string,
    version: string | undefined,
    ready: boolean,
  ): void {
    if (this.tenants.enabled) {
      // A model's metadata and readiness are the tenant's business only for the models it may use.
      const tenant = this.tenantOf(res, req, true);
      if (tenant === undefined) return;
      if (!tenant.allows(name)) {
        this.metrics.recordRequest(UNROUTED_SLOT, PROTOCOL_HTTP, FORBIDDEN_CODE, 0, tenant.metricsIndex);
        this.reply(
          res,
          403,
          encodeV2Error('forbidden', `tenant "${tenant.name}" may not use model "${name}"`),
        );
        return;
      }
    }
    const { status, body } = this.status.v2Model(name, version, ready, this.admission.draining);
    this.reply(res, status, body);
  }

  /**
   * The tenant of an HTTP request, from its `Authorization: Bearer` key (hashed per request: about a
   * microsecond, see docs/serving/tenants.md); undefined when refused — answered 401 from the headers, the body unread
   * and the connection closed.
   */
  private tenantOf(res: uWS.HttpResponse, req: uWS.HttpRequest, v2: boolean): TenantState | undefined {
    const key = bearerKey(req.getHeader('authorization'));
    const tenant = this.tenants.lookup(key);
    if (tenant !== undefined) return tenant;
    this.metrics.recordRequest(UNROUTED_SLOT, PROTOCOL_HTTP, UNAUTHORIZED_CODE, 0);
    const message =
      key === undefined ? 'an API key is required: send Authorization: Bearer <key>' : 'unknown API key';
    writeJson(
      res,
      401,
      v2 ? encodeV2Error('unauthorized', message) : encodeError(null, 'unauthorized', message),
      true,
    );
    return undefined;
  }

  /** An answer with no request behind it (metadata, 404, 405). */
  reply(res: uWS.HttpResponse, status: number, body: string, close = false): void {
    writeJson(res, status, body, close || this.admission.draining);
  }
}
