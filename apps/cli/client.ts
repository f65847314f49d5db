/**
 * Small HTTP client for the CLI's control commands (status, reload, models, rollout): node:http(s), so a
 * unix socket (`unix:/path`) works like a URL. It finds the server's admin listener by itself
 * (adminTarget): https when the admin listener has a certificate (trusted by the system's CAs, or add yours
 * with NODE_EXTRA_CA_CERTS).
 */
import { readFileSync } from 'node:fs';
import * as http from 'node:http';
import * as https from 'node:https';
import { readTokenFile } from '../../libs/admin';
import { ADMIN_PORT, resolveConfig } from '../../libs/config';
import { ClientError } from './errors';

export interface ClientOptions {
  /** http(s)://host:port, or unix:/path/to/socket. */
  url: string;
  token?: string;
  timeoutMs?: number;
}

/** node:tls codes of a server certificate the client does not trust. */
const TLS_TRUST_CODES = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
]);

/** Where one request goes: a unix socket, or a URL's host and port. */
function target(base: string, path: string): { url: URL; socketPath?: string } {
  if (base.startsWith('unix:')) return { url: new URL(path, 'http://localhost'), socketPath: base.slice(5) };
  return { url: new URL(path, base) };
}

export async function callServer(
  options: ClientOptions,
  method: 'GET' | 'POST',
  path: string,
  body?: unknown,
): Promise<{ status: number; body: unknown }> {
  const headers: Record<string, string> = { accept: 'application/json' };
  // The admin API takes JSON only (a POST without it is 415): say so even when there is no body.
  if (method !== 'GET') headers['content-type'] = 'application/json';
  if (options.token) headers.authorization = `Bearer ${options.token}`;
  const payload = body === undefined ? undefined : JSON.stringify(body);
  if (payload !== undefined) headers['content-length'] = String(Buffer.byteLength(payload));
  let where: ReturnType<typeof target>;
  try {
    where = target(options.url, path);
  } catch {
    throw new ClientError(`not a server address: ${options.url} (give http(s)://host:port or unix:/path)`);
  }
  const { url, socketPath } = where;
  const request = url.protocol === 'https:' ? https.request : http.request;
  const text = await new Promise<{ status: number; text: string }>((resolve, reject) => {
    const req = request(
      url,
      { method, headers, timeout: options.timeoutMs ?? 30000, ...(socketPath ? { socketPath } : {}) },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }),
        );
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`no answer within ${options.timeoutMs ?? 30000} ms`)));
    req.on('error', (error: NodeJS.ErrnoException) =>
      reject(
        new ClientError(
          `cannot reach StreamInfer at ${options.url}: ${error.message}${error.code && !error.message.includes(error.code) ? ` (${error.code})` : ''}${
            // A server certificate from a private CA: Node trusts it through NODE_EXTRA_CA_CERTS.
            TLS_TRUST_CODES.has(error.code ?? '')
              ? '; if the server uses a private CA, set NODE_EXTRA_CA_CERTS to its PEM file'
              : ''
          }`,
        ),
      ),
    );
    req.end(payload);
  });
  let parsed: unknown = text.text;
  try {
    parsed = JSON.parse(text.text);
  } catch {
    // non-JSON answers (metrics) stay text
  }
  return { status: text.status, body: parsed };
}

/** How a client asks for the admin listener: flags of the control commands. */
export interface AdminFlags {
  url?: string;
  adminSocket?: string;
  /** A server config file: its admin settings say where the admin listener is and where its token lives. */
  config?: string;
  token?: string;
  tokenFile?: string;
}

/** A listener bound to every address is reached on loopback. */
function connectable(host: string): string {
  if (host === '0.0.0.0') return '127.0.0.1';
  if (host === '::') return '[::1]';
  return host.includes(':') ? `[${host}]` : host;
}

/**
 * The admin listener and its token, from the first that says: `--url`, STREAMINFER_ADMIN_URL,
 * `--admin-socket` / STREAMINFER_ADMIN_SOCKET, the admin settings of `--config` and the STREAMINFER_ADMIN_*
 * environment (as the server resolves them), else http://127.0.0.1:8001. The token: `--token-file`,
 * `--token`, STREAMINFER_ADMIN_TOKEN, the configuration's adminTokenFile. Throws Error with the reason.
 */
export function adminTarget(flags: AdminFlags, env: NodeJS.ProcessEnv = process.env): ClientOptions {
  let file: unknown;
  if (flags.config) {
    try {
      file = JSON.parse(readFileSync(flags.config, 'utf8'));
    } catch (error) {
      throw new Error(`cannot read config file ${flags.config}: ${(error as Error).message}`);
    }
  }
  const config = resolveConfig({
    flags: flags.adminSocket ? { adminSocket: flags.adminSocket } : {},
    env,
    ...(file !== undefined ? { file, filePath: flags.config } : {}),
  });
  let url = flags.url ?? (env.STREAMINFER_ADMIN_URL?.trim() || undefined);
  if (url === undefined) {
    if (config.adminSocket !== undefined) url = `unix:${config.adminSocket}`;
    else {
      if (config.adminPort === 0)
        throw new Error('adminPort is 0 (any free port): give the bound one with --url or --port');
      const scheme = config.adminTlsCert !== undefined ? 'https' : 'http';
      url = `${scheme}://${connectable(config.adminHost)}:${config.adminPort || ADMIN_PORT}`;
    }
  }
  const token = flags.tokenFile
    ? readTokenFile(flags.tokenFile)
    : (flags.token ??
      (env.STREAMINFER_ADMIN_TOKEN?.trim() ||
        (config.adminTokenFile !== undefined ? readTokenFile(config.adminTokenFile) : config.adminToken)));
  return token ? { url, token } : { url };
}
