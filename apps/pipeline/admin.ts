/**
 * The pipeline's admin endpoint, on the shared admin listener (libs/admin: TCP, a unix socket or TLS): probes
 * (`/health`, `/ready`), Prometheus `/metrics`, and the admin API — `POST /api/reload {model?, version?}` (the
 * epoch barrier; same contract as the server's, so `streaminfer reload --url` works against both),
 * `GET /api/reload` (last outcome), `GET /api/pipeline`, `POST /api/pause` / `POST /api/resume` (stop and
 * restart consuming, keeping keyed state), `POST /api/partitions/<k>/recover {from}` (a failed partition:
 * its bad checkpoint pointer quarantined, restored from the previous checkpoint or the ack floor),
 * `GET /api/profile?seconds=N` (a CPU profile of the pipeline process's main thread, cpuprofile JSON).
 * `/health` is 503 unless consuming (`not_consuming` says why). `/api/*` and `/metrics` pass the server's checks
 * (checkAdminRequest): the token when one is configured, JSON bodies, no foreign Origin. Every handler is
 * guarded: a bad request is a typed JSON error, never a crash.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import { isLoopbackName } from '../../libs/address';
import {
  type AdminAddress,
  AdminListener,
  type AdminPolicy,
  type AdminSecrets,
  AdminSetupError,
  checkAdminRequest,
  readAdminSecrets,
  readRequestBody,
  requestHead,
  sendText,
} from '../../libs/admin';
import { httpStatusOf } from '../../libs/protocol';
import type { PipelineConfig } from './config';
import { CpuProfiler, profileSeconds } from './cpu-profile';
import { PipelineIoError, RecoverRefused } from './errors';
import type { PipelineMetrics } from './metrics';
import type { DeliveryPipeline } from './pipeline';

const MAX_BODY_BYTES = 64 * 1024;

const HTTP_STATUS: Record<string, number> = {
  unauthorized: 401,
  forbidden: 403,
  unsupported_media_type: 415,
};

function send(res: ServerResponse, status: number, body: unknown, contentType = 'application/json'): void {
  sendText(res, status, contentType, typeof body === 'string' ? body : JSON.stringify(body));
}

function error(res: ServerResponse, status: number, code: string, message: string, close = false): void {
  sendText(res, status, 'application/json', JSON.stringify({ code, message, error: message }), { close });
}

/** The admin endpoint's secrets: the token (admin.tokenFile, else STREAMINFER_ADMIN_TOKEN) and TLS files. */
/**
 * Reads admin.tokenFile and admin.tls (at start, and on SIGHUP) and applies the rule the server's admin
 * listener has: off loopback and off a unix socket, a token is required. Throws AdminSetupError.
 */
export function readPipelineAdminSecrets(
  admin: PipelineConfig['admin'],
  env: Record<string, string | undefined>,
  warn: (message: string) => void,
): AdminSecrets {
  const secrets = readAdminSecrets(
    {
      ...(admin.tokenFile !== '' ? { tokenFile: admin.tokenFile } : {}),
      token: env.STREAMINFER_ADMIN_TOKEN?.trim() || undefined,
      ...(admin.tls.cert !== '' ? { tlsCert: admin.tls.cert, tlsKey: admin.tls.key } : {}),
    },
    warn,
  );
  if (secrets.token === undefined && admin.socket === '' && !isLoopbackName(admin.host))
    throw new AdminSetupError(
      `the pipeline admin endpoint on "${admin.host}" (admin.host) is reachable from other machines and has no token: ` +
        'set admin.tokenFile (or STREAMINFER_ADMIN_TOKEN), or keep admin.host on loopback or use admin.socket',
    );
  return secrets;
}

export class PipelineAdmin {
  private listener: AdminListener | undefined;
  private policy: AdminPolicy;
  private readonly profiler = new CpuProfiler();

  constructor(
    private readonly pipeline: () => DeliveryPipeline | undefined,
    private readonly metrics: PipelineMetrics,
    private readonly config: PipelineConfig['admin'],
    private secrets: AdminSecrets,
    private readonly logger: Logger,
  ) {
    this.policy = policyOf(secrets);
  }

  async listen(): Promise<AdminAddress> {
    const listener = new AdminListener(
      { host: this.config.host, port: this.config.port, socket: this.config.socket || undefined },
      (req, res) => {
        this.handle(req, res).catch((err: unknown) => {
          this.logger.error({ err: String(err), url: req.url }, 'admin handler failed');
          error(res, 500, 'internal', 'internal error', true);
        });
      },
      this.secrets.tls,
    );
    this.listener = listener;
    return listener.listen();
  }

  /** New secrets (SIGHUP): the token for the next request, the certificate for new connections. */
  useSecrets(secrets: AdminSecrets): void {
    if (secrets.tls) this.listener?.useTls(secrets.tls);
    this.secrets = secrets;
    this.policy = policyOf(secrets);
  }

  async close(): Promise<void> {
    await this.listener?.close();
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const head = requestHead(req);
    const method = head.method;
    const [path = '/', query = ''] = (req.url ?? '/').split('?', 2);
    const pipeline = this.pipeline();
    if (path.startsWith('/api/') || path === '/metrics') {
      const decision = checkAdminRequest(this.policy, head);
      if (!decision.ok)
        return error(
          res,
          HTTP_STATUS[decision.code] ?? 403,
          decision.code,
          decision.reason,
          method !== 'GET' && method !== 'HEAD',
        );
    }
    if (path === '/metrics') {
      if (method !== 'GET') return error(res, 405, 'method_not_allowed', 'use GET /metrics');
      return send(res, 200, await this.metrics.registry.metrics(), this.metrics.registry.contentType);
    }
    if (path === '/health' || path === '/ready') {
      if (method !== 'GET') return error(res, 405, 'method_not_allowed', `use GET ${path}`);
      if (!pipeline) return send(res, 503, { state: 'starting' });
      const status = await pipeline.status();
      return send(res, status.consuming ? 200 : 503, status);
    }
    if (!path.startsWith('/api/')) return error(res, 404, 'not_found', `no route ${path}`);
    if (path === '/api/profile') {
      if (method !== 'GET') return error(res, 405, 'method_not_allowed', 'use GET /api/profile?seconds=N');
      const seconds = profileSeconds(query);
      if (typeof seconds === 'string') return error(res, 400, 'bad_request', seconds);
      const profile = await this.profiler.profile(seconds);
      if (profile === undefined) return error(res, 409, 'profile_busy', 'a profile is already being taken');
      return send(res, 200, profile);
    }
    if (!pipeline) return error(res, 503, 'unavailable', 'the pipeline is starting');
    if (path === '/api/pipeline') {
      if (method !== 'GET') return error(res, 405, 'method_not_allowed', 'use GET /api/pipeline');
      return send(res, 200, await pipeline.status());
    }
    if (path === '/api/pause' || path === '/api/resume') {
      if (method !== 'POST') return error(res, 405, 'method_not_allowed', `use POST ${path}`);
      return send(res, 200, path === '/api/pause' ? await pipeline.pause() : await pipeline.resume());
    }
    if (path === '/api/reload') {
      if (method === 'GET') return send(res, 200, pipeline.lastReloadOutcome() ?? { id: 0 });
      if (method !== 'POST')
        return error(res, 405, 'method_not_allowed', 'use POST /api/reload (GET shows the last outcome)');
      const text = await readRequestBody(req, MAX_BODY_BYTES);
      if (text === undefined)
        return error(res, 413, 'payload_too_large', `body exceeds ${MAX_BODY_BYTES} bytes`, true);
      let body: unknown;
      try {
        body = text.trim() === '' ? {} : JSON.parse(text);
      } catch {
        return error(res, 400, 'bad_request', 'body must be JSON');
      }
      const request = parseReload(body);
      if (typeof request === 'string') return error(res, 400, 'bad_request', request);
      const outcome = await pipeline.reload(request, 'admin api');
      // A model or version that does not exist is the caller's to fix (404, its code), like the server's.
      const status = outcome.code ? httpStatusOf(outcome.code) : outcome.result === 'failed' ? 500 : 200;
      return send(res, status, outcome);
    }
    const recover = /^\/api\/partitions\/(\d{1,6})\/recover$/.exec(path);
    if (recover) {
      if (method !== 'POST') return error(res, 405, 'method_not_allowed', `use POST ${path}`);
      const text = await readRequestBody(req, MAX_BODY_BYTES);
      if (text === undefined)
        return error(res, 413, 'payload_too_large', `body exceeds ${MAX_BODY_BYTES} bytes`, true);
      let body: unknown;
      try {
        body = JSON.parse(text);
      } catch {
        return error(res, 400, 'bad_request', 'body must be JSON: {"from": "previous" | "ack-floor"}');
      }
      const from = (body as { from?: unknown } | null)?.from;
      if (from !== 'previous' && from !== 'ack-floor')
        return error(res, 400, 'bad_request', '"from" must be "previous" or "ack-floor"');
      try {
        const outcome = await pipeline.recoverPartition(Number(recover[1]), from);
        return send(res, outcome.state === 'running' ? 200 : 500, outcome);
      } catch (err) {
        if (err instanceof RecoverRefused) return error(res, err.status, err.code, err.message);
        if (err instanceof PipelineIoError && err.code === 'checkpoint_invalid')
          return error(res, 409, 'checkpoint_invalid', err.message);
        throw err;
      }
    }
    return error(res, 404, 'not_found', `no route ${path}`);
  }
}

function policyOf(secrets: AdminSecrets): AdminPolicy {
  return { ...(secrets.token !== undefined ? { token: secrets.token } : {}), allowedOrigins: [] };
}

/** `{model?, version?, strategy?}`; a string is the reason it is refused. */
export function parseReload(body: unknown): { model?: string; version?: string } | string {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return 'body must be a JSON object';
  const b = body as Record<string, unknown>;
  for (const key of Object.keys(b)) {
    if (!['model', 'version', 'strategy'].includes(key))
      return `unknown field "${key}" (a pipeline reload takes model and version)`;
  }
  if (b.strategy !== undefined && b.strategy !== 'atomic')
    return 'a pipeline reload is always atomic (an epoch barrier)';
  const out: { model?: string; version?: string } = {};
  for (const key of ['model', 'version'] as const) {
    const v = b[key];
    if (v === undefined) continue;
    if (typeof v !== 'string' || !/^[A-Za-z0-9_.-]{1,128}$/.test(v)) return `"${key}" must be a name`;
    out[key] = v;
  }
  if (out.model === undefined && out.version === undefined) return 'give "version" (and optionally "model")';
  return out;
}
