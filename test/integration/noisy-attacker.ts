/**
 * One bounded attack on a running server, run as its own process by the noisy-neighbour suite
 * (`node noisy-attacker.js '<AttackSpec JSON>'`; it prints `ready` once started and waits for a line on stdin,
 * so its start-up is not part of the attack): it sends as fast as its sockets take, but never more than
 * `maxFrames` per connection nor longer than `durationMs`, counts every answer by its code, every close by its
 * code and every refused upgrade by its status, and prints one JSON line (an Outcome).
 */
import * as http from 'node:http';
import WebSocket from 'ws';
import { encodeBinaryFrame } from '../../libs/protocol';
import { Random } from './fuzz-kit';

export type AttackKind = 'malformed' | 'flood' | 'poison' | 'shapes' | 'connections' | 'pinned';

export interface AttackSpec {
  kind: AttackKind;
  port: number;
  /** The attacker's own loopback address (127.0.0.x): limits keyed per address see one client. */
  localAddress: string;
  connections: number;
  durationMs: number;
  /** Per connection. */
  maxFrames: number;
  seed: number;
  /** Pause after each turn of frames (0 = as fast as the socket takes). */
  pauseMs?: number;
  /** Frames per turn (default 256). */
  perTurn?: number;
  /** pinned: the version the attacker pins. */
  version?: string;
}

export interface Outcome {
  /** Frames (or HTTP requests) sent. */
  sent: number;
  /** Answers by code: `ok`, an error code, or `unparsed`. */
  answers: Record<string, number>;
  /** Connections closed by the server, by close code. */
  closes: Record<string, number>;
  /** Upgrades refused, by `<status> <code>`. */
  refused: Record<string, number>;
  opened: number;
  /** Connections that failed for any other reason (message). */
  failures: Record<string, number>;
}

/** Past this many unsent bytes the sender waits for its socket (as fast as the socket takes, no faster). */
const HIGH_WATER = 1 << 20;
/** Frames per turn of the event loop, so answers are read while sending. */
const PER_TURN = 256;

const outcome: Outcome = { sent: 0, answers: {}, closes: {}, refused: {}, opened: 0, failures: {} };
const count = (table: Record<string, number>, key: string, n = 1): void => {
  table[key] = (table[key] ?? 0) + n;
};
const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

function countAnswer(data: WebSocket.RawData, isBinary: boolean): void {
  if (isBinary) {
    count(outcome.answers, 'ok');
    return;
  }
  try {
    const answer = JSON.parse(data.toString()) as { type?: string; code?: string };
    count(outcome.answers, answer.type === 'error' || answer.type === 'warning' ? String(answer.code) : 'ok');
  } catch {
    count(outcome.answers, 'unparsed');
  }
}

interface Conn {
  socket: WebSocket;
  closedByServer: boolean;
  closed: Promise<void>;
}

/** Opens one connection; a refused upgrade is counted and gives undefined. */
function open(spec: AttackSpec): Promise<Conn | undefined> {
  return new Promise((resolve) => {
    const socket = new WebSocket(`ws://127.0.0.1:${spec.port}/ws`, { localAddress: spec.localAddress });
    let settled = false;
    socket.on('unexpected-response', (_request, response) => {
      let body = '';
      response.on('data', (chunk: Buffer) => (body += chunk.toString()));
      response.on('end', () => {
        let code = '';
        try {
          code = String((JSON.parse(body) as { code?: string }).code);
        } catch {
          code = 'untyped';
        }
        count(outcome.refused, `${response.statusCode} ${code}`);
        settled = true;
        resolve(undefined);
      });
    });
    socket.on('error', (error) => {
      if (settled) return;
      settled = true;
      count(outcome.failures, error.message.slice(0, 80));
      resolve(undefined);
    });
    socket.on('open', () => {
      settled = true;
      outcome.opened++;
      const conn: Conn = {
        socket,
        closedByServer: true,
        closed: new Promise((done) =>
          socket.on('close', (code) => {
            if (conn.closedByServer) count(outcome.closes, String(code));
            done();
          }),
        ),
      };
      socket.on('message', countAnswer);
      resolve(conn);
    });
  });
}

async function closeAll(conns: Conn[]): Promise<void> {
  // Answers still on their way are read first.
  await sleep(300);
  for (const conn of conns) {
    if (conn.socket.readyState !== WebSocket.OPEN) continue;
    conn.closedByServer = false;
    conn.socket.close();
  }
  await Promise.race([Promise.all(conns.map((conn) => conn.closed)), sleep(2000)]);
  for (const conn of conns) conn.socket.terminate();
}

/** Sends frames from `next` as fast as the socket takes, bounded by count and time. */
async function blast(conn: Conn, spec: AttackSpec, next: (i: number) => string | Uint8Array): Promise<void> {
  const deadline = performance.now() + spec.durationMs;
  let i = 0;
  while (i < spec.maxFrames && performance.now() < deadline && conn.socket.readyState === WebSocket.OPEN) {
    for (
      let n = 0;
      n < (spec.perTurn ?? PER_TURN) && i < spec.maxFrames && conn.socket.bufferedAmount < HIGH_WATER;
      n++
    ) {
      const frame = next(i++);
      conn.socket.send(frame, { binary: typeof frame !== 'string' });
      outcome.sent++;
    }
    await turn();
    if (spec.pauseMs) await sleep(spec.pauseMs);
  }
}

/** Text frames of one byte and binary frames of random bytes (neither is a request). */
function malformed(random: Random): (i: number) => string | Uint8Array {
  const garbage = Array.from({ length: 64 }, () => random.bytes(1 + random.below(40)));
  return (i) => (i % 2 === 0 ? 'x' : garbage[i % garbage.length]!);
}

/** Requests the model accepts and computes (echo, 3 floats). */
const valid = (i: number): string => JSON.stringify({ id: i, model: 'echo', input: [i, 0.5, -1] });

/** lookup requests with one id out of the table: the model's run fails on them. */
const poison = (i: number): string => JSON.stringify({ id: i, model: 'lookup', input: [1, 2, 1000 + i, 3] });

/** digits requests pinned to a version with a deadline no request can meet. */
const pinned = (version: string) => {
  const pixels = Array.from({ length: 64 }, (_, k) => k % 17);
  return (i: number): string =>
    JSON.stringify({ id: i, model: 'digits', version, deadline_ms: 0.001, input: pixels });
};

/** The shapes that cost the node nothing to hold but everything to nest: `[1, 10000000, 0]` and `[1, 2^31, 0]`. */
const SHAPES = [
  [1, 10_000_000, 0],
  [1, 2_147_483_648, 0],
  [10_000_000, 0],
  [0, 2_147_483_648, 2_147_483_648],
];

function v2Post(spec: AttackSpec, shape: number[]): Promise<void> {
  const body = JSON.stringify({ inputs: [{ name: 'input', shape, datatype: 'FP32', data: [] }] });
  return new Promise((resolve) => {
    const request = http.request(
      {
        host: '127.0.0.1',
        port: spec.port,
        localAddress: spec.localAddress,
        path: '/v2/models/echo/infer',
        method: 'POST',
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
        timeout: 15000,
      },
      (response) => {
        let text = '';
        response.on('data', (chunk: Buffer) => (text += chunk.toString()));
        response.on('end', () => {
          let code = 'unparsed';
          try {
            code = String((JSON.parse(text) as { code?: string }).code);
          } catch {
            // counted as unparsed
          }
          count(outcome.answers, `${response.statusCode} ${code}`);
          resolve();
        });
      },
    );
    request.on('timeout', () => request.destroy(new Error('timed out')));
    request.on('error', (error) => {
      count(outcome.failures, `v2: ${error.message.slice(0, 60)}`);
      resolve();
    });
    outcome.sent++;
    request.end(body);
  });
}

/** Binary tensor frames for echo naming the zero-element shapes, with no tensor bytes. */
function shapeFrames(i: number): Uint8Array {
  const dims = SHAPES[i % SHAPES.length]!;
  return encodeBinaryFrame({ id: i, model: 'echo', inputs: [{ name: 'input', dtype: 'float32', dims }] }, [
    { bytes: new Uint8Array(0) },
  ]);
}

/** Tells the suite this process is up (and its connections open), then waits for its `go` on stdin. */
async function ready(): Promise<void> {
  process.stdout.write('ready\n');
  await new Promise<void>((resolve) => process.stdin.once('data', () => resolve()));
}

async function main(spec: AttackSpec): Promise<void> {
  const random = new Random(spec.seed);
  const conns: Conn[] = [];
  if (spec.kind === 'connections') {
    await ready();
    // Opened one after the other, each kept open and used now and then, all held for the whole attack.
    const deadline = performance.now() + spec.durationMs;
    for (let c = 0; c < spec.connections && performance.now() < deadline; c++) {
      const conn = await open(spec);
      if (conn) conns.push(conn);
    }
    let i = 0;
    while (performance.now() < deadline) {
      for (const conn of conns) {
        if (conn.socket.readyState !== WebSocket.OPEN) continue;
        conn.socket.send(valid(i++));
        outcome.sent++;
      }
      await sleep(spec.pauseMs ?? 100);
    }
    await closeAll(conns);
    return;
  }
  for (let c = 0; c < spec.connections; c++) {
    const conn = await open(spec);
    if (conn) conns.push(conn);
  }
  await ready();
  if (spec.kind === 'shapes') {
    // Four HTTP callers and one WebSocket connection, each one request at a time, for the whole attack.
    const deadline = performance.now() + spec.durationMs;
    const callers = Array.from({ length: 4 }, async (_, k) => {
      for (let i = k; i < spec.maxFrames && performance.now() < deadline; i += 4)
        await v2Post(spec, SHAPES[i % SHAPES.length]!);
    });
    const ws = conns.map((conn) =>
      blast(conn, { ...spec, perTurn: spec.perTurn ?? 1, pauseMs: spec.pauseMs ?? 5 }, shapeFrames),
    );
    await Promise.all([...callers, ...ws]);
  } else {
    const next =
      spec.kind === 'malformed'
        ? malformed(random)
        : spec.kind === 'flood'
          ? valid
          : spec.kind === 'poison'
            ? poison
            : pinned(spec.version ?? '1');
    await Promise.all(conns.map((conn) => blast(conn, spec, next)));
  }
  await closeAll(conns);
}

if (require.main === module) {
  main(JSON.parse(process.argv[2]!) as AttackSpec).then(
    () => {
      process.stdout.write(`${JSON.stringify(outcome)}\n`);
      process.exit(0);
    },
    (error: unknown) => {
      process.stderr.write(`${String(error instanceof Error ? error.stack : error)}\n`);
      process.exit(1);
    },
  );
}
