/**
 * Small HTTP client for the CLI's control commands (status, reload, models). `https://` URLs work; a private
 * CA is trusted through NODE_EXTRA_CA_CERTS, which Node applies to fetch and to ws alike.
 */
export interface ClientOptions {
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

export class ClientError extends Error {
  constructor(
    message: string,
    readonly status?: number,
    readonly body?: unknown,
  ) {
    super(message);
    this.name = 'ClientError';
  }
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
  let response: Response;
  try {
    const init: RequestInit = { method, headers, signal: AbortSignal.timeout(options.timeoutMs ?? 30000) };
    if (body !== undefined) init.body = JSON.stringify(body);
    response = await fetch(new URL(path, options.url), init);
  } catch (error) {
    // fetch says only "fetch failed"; the reason (ECONNREFUSED, ENOTFOUND, ...) is in its cause.
    const cause = (error as Error).cause as (Error & { code?: string }) | undefined;
    const why = cause?.message || cause?.code;
    // A server certificate from a private CA: Node trusts it through NODE_EXTRA_CA_CERTS (fetch and ws alike).
    const hint = TLS_TRUST_CODES.has(cause?.code ?? '')
      ? '; if the server uses a private CA, set NODE_EXTRA_CA_CERTS to its PEM file'
      : '';
    throw new ClientError(
      `cannot reach StreamInfer at ${options.url}: ${(error as Error).message}${why ? ` (${why})` : ''}${hint}`,
    );
  }
  const text = await response.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // non-JSON answers (metrics) stay text
  }
  return { status: response.status, body: parsed };
}

export function defaultUrl(): string {
  const port = process.env.STREAMINFER_PORT?.trim() || '8000';
  return `http://127.0.0.1:${port}`;
}
