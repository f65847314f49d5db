/** Reading and answering admin requests on node:http: the head that decides them, the body, the answer. */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AdminRequestHead } from './auth';

function header(req: IncomingMessage, name: string): string {
  const value = req.headers[name];
  return Array.isArray(value) ? value.join(', ') : (value ?? '');
}

/** What checkAdminRequest reads of a request. */
export function requestHead(req: IncomingMessage): AdminRequestHead {
  return {
    method: (req.method ?? 'GET').toUpperCase(),
    authorization: header(req, 'authorization'),
    forwardedFor: header(req, 'x-forwarded-for'),
    forwarded: header(req, 'forwarded'),
    host: header(req, 'host'),
    origin: header(req, 'origin'),
    contentType: header(req, 'content-type'),
  };
}

/** The request body as text; undefined once it passes `maxBytes` (the rest is not read). */
export function readRequestBody(req: IncomingMessage, maxBytes: number): Promise<string | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    req.on('data', (chunk: Buffer) => {
      if (done) return;
      size += chunk.length;
      if (size > maxBytes) {
        done = true;
        resolve(undefined);
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => {
      if (!done) resolve(Buffer.concat(chunks).toString('utf8'));
    });
    req.on('error', reject);
  });
}

/** One answer; `close` asks the client to close (the body of a refused request was left unread). */
export function sendText(
  res: ServerResponse,
  status: number,
  contentType: string,
  body: string,
  options: { close?: boolean; headers?: Record<string, string> } = {},
): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.writeHead(status, {
    ...options.headers,
    'content-type': contentType,
    'content-length': Buffer.byteLength(body),
    ...(options.close ? { connection: 'close' } : {}),
  });
  res.end(body);
}
