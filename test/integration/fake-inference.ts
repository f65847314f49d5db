/**
 * A stand-in for a StreamInfer server as the pipeline's external mode sees it: `GET
 * /v2/models/<m>/versions/<v>/ready` and predictions over the WebSocket `/ws` (JSON frames). The risk is a
 * pure function of the row, so any instance predicts the same value for the same decision. `hold()` keeps
 * every answer back until `release()`: a test can keep a pipeline's calls in flight across a lease change.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type WebSocket, WebSocketServer } from 'ws';

export interface FakeInference {
  wsUrl: string;
  /** Requests answered or waiting, in all. */
  readonly requests: number;
  /** Answers held back now. */
  readonly held: number;
  hold(): void;
  /** Sends every held answer and stops holding. */
  release(): void;
  close(): Promise<void>;
}

/** delay-risk's range, from the row alone. */
export function fakeRisk(row: readonly number[]): number {
  const sum = row.reduce((a, b) => a + b, 0);
  return Math.fround(1 / (1 + Math.exp(-sum / 100)));
}

export async function startFakeInference(version = '1'): Promise<FakeInference> {
  const http: Server = createServer((req, res) => {
    const ready = /^\/v2\/models\/[^/]+\/versions\/([^/]+)\/ready$/.exec(req.url ?? '');
    if (req.method === 'GET' && ready && ready[1] === version) {
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"ready":true}');
      return;
    }
    res
      .writeHead(404, { 'content-type': 'application/json' })
      .end('{"error":"not served","code":"unknown_version"}');
  });
  const wss = new WebSocketServer({ server: http, path: '/ws' });
  let holding = false;
  let requests = 0;
  const waiting: Array<{ ws: WebSocket; answer: string }> = [];
  wss.on('connection', (ws) => {
    ws.on('message', (data, isBinary) => {
      if (isBinary) return;
      const call = JSON.parse(data.toString()) as { id: number; input: number[] };
      requests++;
      const answer = JSON.stringify({ id: call.id, version, result: [fakeRisk(call.input)] });
      if (holding) waiting.push({ ws, answer });
      else ws.send(answer);
    });
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const { port } = http.address() as AddressInfo;
  return {
    wsUrl: `ws://127.0.0.1:${port}/ws`,
    get requests() {
      return requests;
    },
    get held() {
      return waiting.length;
    },
    hold() {
      holding = true;
    },
    release() {
      holding = false;
      for (const w of waiting.splice(0)) if (w.ws.readyState === w.ws.OPEN) w.ws.send(w.answer);
    },
    async close() {
      for (const ws of wss.clients) ws.terminate();
      await new Promise<void>((resolve) => wss.close(() => resolve()));
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}
