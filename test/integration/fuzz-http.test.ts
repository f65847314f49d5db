/**
 * HTTP fuzz: every route × every method × hostile paths (bad escapes, %00, traversal, 5,000-character names)
 * × hostile bodies, over raw TCP (so paths reach the server byte for byte, unnormalized). Every answer is a
 * 4xx with a typed JSON error (HEAD: no body), never a dropped connection or a 5xx; no node restarts.
 * Bodies are hostile by construction: nothing here may trigger a real reload or registry change.
 */
import * as net from 'node:net';
import { ERROR_CODES } from '../../libs/protocol';
import { Random } from './fuzz-kit';
import type { ServerHandle } from './harness';
import { sleep, startServer } from './harness';

const SEED = 0x5eed_4177;
const MAX_PAYLOAD = 65536;
const CONCURRENCY = 16;
const METHODS = ['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'HEAD'] as const;

let server: ServerHandle;

beforeAll(async () => {
  server = await startServer({
    models: ['echo', 'upper'],
    args: ['--workers', '1', '--max-payload-bytes', String(MAX_PAYLOAD)],
  });
  // Fuzz only a ready server (/health answers 503 while it is not).
  for (let i = 0; i < 100 && (await fetch(`${server.url}/health`)).status !== 200; i++) await sleep(100);
});

afterAll(async () => {
  expect(await server.stop()).toEqual({ code: 0, signal: null });
});

/**
 * Every route the server has; {n} and {v} take the hostile names. /metrics and /api/* are the admin
 * listener's (node:http in the supervisor): they are sent there (adminRoute); the rest to the data port.
 */
const ROUTES = [
  '/ws',
  '/predict',
  '/v2',
  '/v2/models/{n}',
  '/v2/models/{n}/ready',
  '/v2/models/{n}/infer',
  '/v2/models/{n}/versions/{v}',
  '/v2/models/{n}/versions/{v}/ready',
  '/v2/models/{n}/versions/{v}/infer',
  '/v2/health/live',
  '/v2/health/ready',
  '/health',
  '/metrics',
  '/api/reload',
  '/api/models',
  '/api/models/{n}/candidate',
  '/api/models/{n}/canary',
  '/api/models/{n}/shadow',
  '/api/models/{n}/promote',
  '/api/models/{n}/rollback',
  '/api/models/{n}/rollout',
  '/api/models/{n}/rollout/pause',
  '/api/models/{n}/rollout/resume',
  '/api/models/{n}/rollout/abort',
  '/api/fleet',
  '/api/debug/crash-worker',
];

const LONG = 'a'.repeat(5000);
/** Hostile path segments for {n} and {v}. */
const NAMES = [
  '%',
  '%E0%A4%A',
  '%zz',
  '%00',
  'echo%00',
  '..',
  '../..',
  '..%2F..%2Fetc%2Fpasswd',
  '%2e%2e',
  '%ED%A0%80',
  '%C0%AE',
  '%FF%FE',
  LONG,
  '%41'.repeat(1700),
  'echo%',
];

/** Hostile variants of a route without parameters. */
function variantsOf(route: string): string[] {
  return [
    `${route}%`,
    `${route}%E0%A4%A`,
    `${route}/%00`,
    `${route}%00`,
    `${route}/../..${route}`,
    `/..${route}`,
    `/%2e%2e${route}`,
    `${route}/${LONG}`,
    `${route}/%`,
  ];
}

/** A seeded random path segment: broken and valid escapes, dots, slashes, %00, and path-safe characters. */
function randomName(random: Random): string {
  const parts = [
    '%',
    '%0',
    '%00',
    '%2F',
    '%2e',
    '..',
    '/',
    '%E0%A4',
    '%ZZ',
    '%ff',
    'a',
    'Z',
    '-',
    '~',
    '!',
    '$',
    "'",
  ];
  let name = '';
  const length = 1 + random.below(12);
  for (let i = 0; i < length; i++)
    name +=
      random.below(3) === 0 ? `%${random.below(256).toString(16).padStart(2, '0')}` : random.pick(parts);
  return name;
}

const RANDOM_NAMES_PER_ROUTE = 12;

function hostilePaths(route: string, random: Random): string[] {
  if (!route.includes('{')) return variantsOf(route);
  const paths: string[] = [];
  const names = [...NAMES, ...Array.from({ length: RANDOM_NAMES_PER_ROUTE }, () => randomName(random))];
  for (const name of names) {
    const version = route.includes('{v}') ? random.pick(NAMES) : '';
    paths.push(route.replace('{n}', name).replace('{v}', version));
    if (route.includes('{v}')) paths.push(route.replace('{n}', 'echo').replace('{v}', name));
  }
  paths.push(`${route.replace('{n}', '%').replace('{v}', '1')}?q=%&x=%E0%A4%A`);
  return paths;
}

const encoder = new TextEncoder();

/**
 * Hostile bodies. For admin routes never one an admin route could act on: no JSON object, and no missing or
 * blank body (that reads as `{}`: POST /api/reload with no body is a real reload).
 */
function hostileBodies(random: Random, forAdmin: boolean): Array<Uint8Array | undefined> {
  const bodies: Array<Uint8Array | undefined> = [
    encoder.encode('{"id":'),
    encoder.encode('[1,2,3]'),
    encoder.encode('null'),
    encoder.encode('"a string"'),
    encoder.encode('1e999'),
    encoder.encode(`${'['.repeat(3000)}${']'.repeat(3000)}`),
    encoder.encode('\u0000\u0001\u0002'),
    random.bytes(64),
    encoder.encode('x'.repeat(MAX_PAYLOAD + 10)),
  ];
  if (!forAdmin) {
    bodies.push(
      undefined,
      encoder.encode('{}'),
      encoder.encode('{"id":1,"model":"echo","input":[1,"x",null]}'),
      encoder.encode('{"inputs":"nope","model":{"a":1}}'),
      encoder.encode('{"inputs":[{"name":"input","datatype":"FP32","shape":[-5],"data":[1]}]}'),
      encoder.encode('{"inputs":[{"name":"input","datatype":"BYTES","shape":[1],"data":[{}]}]}'),
      encoder.encode('{"__proto__":{"polluted":1},"input":[[[1]]]}'),
    );
  }
  return bodies;
}

interface RawAnswer {
  status: number;
  body: string;
}

function adminRoute(path: string): boolean {
  return path.startsWith('/api/') || path.startsWith('/metrics');
}

/** One request on a fresh connection; resolves with the answer or a reason the connection dropped. */
function rawRequest(method: string, path: string, body: Uint8Array | undefined): Promise<RawAnswer | string> {
  return new Promise((resolve) => {
    const socket = net.connect(adminRoute(path) ? server.adminPort : server.port, '127.0.0.1');
    let data = Buffer.alloc(0);
    let done = false;
    const finish = (result: RawAnswer | string): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(result);
    };
    const timer = setTimeout(() => finish(`no answer within 10 s (${data.length} bytes)`), 10000);
    const parse = (): RawAnswer | undefined => {
      const end = data.indexOf('\r\n\r\n');
      if (end < 0) return undefined;
      const head = data.subarray(0, end).toString('latin1').split('\r\n');
      const status = Number(head[0]!.split(' ')[1]);
      const length = head
        .map((line) => /^content-length:\s*(\d+)/i.exec(line))
        .find((match) => match !== null)?.[1];
      if (method === 'HEAD') return { status, body: '' };
      if (length === undefined) return undefined;
      if (data.length < end + 4 + Number(length)) return undefined;
      return { status, body: data.subarray(end + 4, end + 4 + Number(length)).toString('utf8') };
    };
    socket.on('data', (chunk) => {
      data = Buffer.concat([data, chunk]);
      const answer = parse();
      if (answer) finish(answer);
    });
    socket.on('error', (error) => finish(parse() ?? `connection error: ${error.message}`));
    socket.on('close', () => finish(parse() ?? `connection closed after ${data.length} bytes`));
    const head =
      `${method} ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n` +
      (body ? `Content-Type: application/json\r\nContent-Length: ${body.length}\r\n` : '') +
      '\r\n';
    socket.write(body ? Buffer.concat([Buffer.from(head, 'latin1'), body]) : head);
  });
}

/** Node pids from /health, waiting (up to 15 s) for a node that died to be back, so a restart is counted. */
async function nodePids(): Promise<number[]> {
  for (let attempt = 0; ; attempt++) {
    try {
      const response = await fetch(`${server.url}/health`);
      if (response.status === 200 || attempt >= 150) {
        const health = (await response.json()) as { nodes: Array<{ pid: number }> };
        return health.nodes.map((node) => node.pid);
      }
    } catch (error) {
      if (attempt >= 150) throw error;
    }
    await sleep(100);
  }
}

test('every route × method × hostile path × hostile body: a typed 4xx, never a 5xx or a dropped connection', async () => {
  const random = new Random(SEED);
  const pidsBefore = await nodePids();
  const cases: Array<{ method: string; path: string; body: Uint8Array | undefined }> = [];
  for (const route of ROUTES) {
    const admin = route.startsWith('/api/');
    const bodies = hostileBodies(random, admin);
    // Hostile paths: every method, bodies taken in turn.
    for (const path of hostilePaths(route, random)) {
      for (const method of METHODS) cases.push({ method, path, body: bodies[cases.length % bodies.length] });
    }
    // The route's own path with every hostile body, for every method that is not a plain read.
    if (!route.includes('{')) {
      for (const method of METHODS) {
        if (method === 'GET' || method === 'HEAD') continue;
        for (const body of bodies) cases.push({ method, path: route, body });
      }
    }
  }
  // Hostile bodies on the model routes with a real model name too.
  for (const route of ['/v2/models/echo/infer', '/v2/models/echo/versions/1/infer']) {
    for (const body of hostileBodies(random, false)) cases.push({ method: 'POST', path: route, body });
  }

  const started = performance.now();
  const failures: string[] = [];
  const statuses = new Map<number, number>();
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < cases.length) {
      const { method, path, body } = cases[next++]!;
      const answer = await rawRequest(method, path, body);
      const shown = `${method} ${path.length > 80 ? `${path.slice(0, 80)}…(${path.length})` : path} body=${body?.length ?? 'none'}`;
      if (typeof answer === 'string') {
        failures.push(`${shown}: ${answer}`);
        continue;
      }
      statuses.set(answer.status, (statuses.get(answer.status) ?? 0) + 1);
      if (answer.status < 400 || answer.status >= 500) {
        failures.push(`${shown}: status ${answer.status} ${answer.body.slice(0, 200)}`);
        continue;
      }
      if (method === 'HEAD') continue;
      let code: unknown;
      try {
        code = (JSON.parse(answer.body) as { code?: unknown }).code;
      } catch {
        code = undefined;
      }
      if (!(ERROR_CODES as readonly unknown[]).includes(code))
        failures.push(`${shown}: ${answer.status} without a typed error: ${answer.body.slice(0, 200)}`);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  const seconds = (performance.now() - started) / 1000;
  const pidsAfter = await nodePids();
  const restarts = pidsAfter.filter((pid, i) => pid !== pidsBefore[i]).length;
  console.log(
    `fuzz-http: ${cases.length} requests (${ROUTES.length} routes × ${METHODS.length} methods × hostile paths × hostile bodies) ` +
      `in ${seconds.toFixed(1)} s; statuses ${[...statuses]
        .sort((a, b) => a[0] - b[0])
        .map(([status, n]) => `${status}:${n}`)
        .join(' ')}; failures ${failures.length}; node restarts ${restarts}`,
  );
  if (process.env.FUZZ_DUMP) require('node:fs').writeFileSync(process.env.FUZZ_DUMP, failures.join('\n'));
  expect(failures.slice(0, 30)).toEqual([]);
  expect(restarts).toBe(0);
  expect(server.logs()).not.toMatch(/node exited|handler error/);
  expect((await fetch(`${server.url}/health`)).status).toBe(200);
}, 120000);
