/**
 * The pipeline's HTTP endpoint: probes (`/health`, `/ready`), Prometheus `/metrics`, and the admin API —
 * `POST /api/reload {model?, version?}` (the epoch barrier; same contract as the server's, so
 * `streaminfer reload --url` works against both), `GET /api/reload` (last outcome), `GET /api/pipeline`,
 * `POST /api/pause` / `POST /api/resume` (stop and restart consuming, keeping keyed state).
 * Admin routes need the token or a loopback caller, as on the server. Every handler is guarded: a bad
 * request is a typed JSON error, never a crash.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import { authorizeAdmin } from '../node/admin-auth';
import type { PipelineMetrics } from './metrics';
import type { DeliveryPipeline } from './pipeline';

const MAX_BODY_BYTES = 64 * 1024;

function send(res: ServerResponse, status: number, body: unknown, contentType = 'application/json'): void {
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  res.writeHead(status, { 'content-type': contentType, 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

function error(res: ServerResponse, status: number, code: string, message: string): void {
  send(res, status, { code, message, error: message });
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) {
        reject(new Error('too_large'));
        req.destroy();
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

export interface AdminOptions {
  host: string;
  port: number;
  token?: string;
  logger: Logger;
}

export class PipelineAdmin {
  private server: Server | undefined;

  constructor(
    private readonly pipeline: () => DeliveryPipeline | undefined,
    private readonly metrics: PipelineMetrics,
    private readonly options: AdminOptions,
  ) {}

  async listen(): Promise<number> {
    const server = createServer((req, res) => {
      this.handle(req, res).catch((err: unknown) => {
        this.options.logger.error({ err: String(err), url: req.url }, 'admin handler failed');
        if (!res.headersSent) error(res, 500, 'internal', 'internal error');
        else res.destroy();
      });
    });
    this.server = server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.options.port, this.options.host, () => resolve());
    });
    const address = server.address();
    return typeof address === 'object' && address ? address.port : this.options.port;
  }

  async close(): Promise<void> {
    const server = this.server;
    if (!server) return;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const method = req.method ?? 'GET';
    const path = (req.url ?? '/').split('?')[0] ?? '/';
    const pipeline = this.pipeline();
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
    const auth = authorizeAdmin(
      this.options.token,
      req.socket.remoteAddress ?? '',
      req.headers.authorization ?? '',
      {
        forwardedFor: req.headers['x-forwarded-for'] as string | undefined,
        forwarded: req.headers.forwarded,
      },
    );
    if (!auth.ok) return error(res, 403, 'forbidden', auth.reason);
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
      let body: unknown;
      try {
        const text = await readBody(req);
        body = text.trim() === '' ? {} : JSON.parse(text);
      } catch (err) {
        if ((err as Error).message === 'too_large')
          return error(res, 413, 'payload_too_large', `body exceeds ${MAX_BODY_BYTES} bytes`);
        return error(res, 400, 'bad_request', 'body must be JSON');
      }
      const request = parseReload(body);
      if (typeof request === 'string') return error(res, 400, 'bad_request', request);
      const outcome = await pipeline.reload(request, 'admin api');
      return send(res, outcome.result === 'failed' ? 500 : 200, outcome);
    }
    return error(res, 404, 'not_found', `no route ${path}`);
  }
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
