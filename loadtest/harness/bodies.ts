/**
 * Request-body factories, chosen by name. A factory is built once per connection and
 * returns the JSON text frame for request `id`. Bodies are pre-serialised where possible:
 * on a small shared machine the load generator's own CPU is the scarce resource.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { type BinaryTensor, encodeBinaryFrame, encodeBinaryRequest } from '../../libs/protocol';
import { Rng } from '../../libs/rng';
import { digitsDataPath, loadDigits, N_PIXELS } from '../../scripts/models/digits-data';

export interface BodyOptions {
  /** model name to put in the request (each body kind has a default) */
  model?: string;
  /** version or alias to pin (`"stable"`, `"2"`); omitted when unset */
  version?: string;
  /** extra top-level fields merged into every request, e.g. `{ "priority": "high" }` */
  extra?: Record<string, unknown>;
  /** input length for bodies whose size is configurable (`bench-model`, `echo-floats`) */
  inputSize?: number;
  /** repository root, used to find the model repository and the shared digits data */
  repoRoot?: string;
}

/** (id) → JSON text frame */
export type BodyFn = (id: number) => string;

/** (id) → binary tensor frame (libs/protocol/binary.ts), a fresh buffer per call */
export type BinaryBodyFn = (id: number) => Buffer;

/** What a binary body sends: the tensors of one request (per item, no batch dimension). */
export interface BinaryPayload {
  tensors: BinaryTensor[];
}

export interface BodyKind {
  name: string;
  description: string;
  defaultModel: string;
  /** build the per-connection factory; `conn` seeds the variation between connections */
  create(conn: number, opts: BodyOptions): BodyFn;
  /**
   * The same requests as binary tensor frames: a pool of payloads per connection (the bytes are
   * built once), absent when the kind has no binary form.
   */
  binaryPool?(conn: number, opts: BodyOptions): BinaryPayload[];
}

/** Small deterministic PRNG (mulberry32) so runs are reproducible. */
export function prng(seed: number): () => number {
  const rng = new Rng(seed);
  return () => rng.next();
}

/**
 * Builds `{"id":<id>,"model":...,"version":...,...extra,"<field>":<value>}` by string
 * concatenation from a pre-serialised tail. `pool` holds several tails so consecutive
 * requests differ a little.
 */
function templated(opts: BodyOptions, defaultModel: string, field: string, pool: unknown[]): BodyFn {
  const head: Record<string, unknown> = { model: opts.model ?? defaultModel };
  if (opts.version !== undefined) head['version'] = opts.version;
  Object.assign(head, opts.extra ?? {});
  const headJson = JSON.stringify(head).slice(1, -1); // "model":"echo",...
  const tails = pool.map((v) => ',' + headJson + ',' + JSON.stringify(field) + ':' + JSON.stringify(v) + '}');
  const n = tails.length;
  return (id) => '{"id":' + id + tails[id % n];
}

function floats(rand: () => number, n: number): number[] {
  const out: number[] = [];
  for (let i = 0; i < n; i++) out.push(Math.round((rand() * 2 - 1) * 1e4) / 1e4);
  return out;
}

/** Rows by file: null when the file could not be read. */
const digitsCache = new Map<string, number[][] | null>();

function digitsRowsOf(file: string): number[][] | null {
  let rows = digitsCache.get(file);
  if (rows !== undefined) return rows;
  try {
    const d = loadDigits(file);
    rows = Array.from({ length: d.n }, (_, r) =>
      Array.from(d.pixels.subarray(r * N_PIXELS, (r + 1) * N_PIXELS)),
    );
  } catch {
    rows = null;
  }
  digitsCache.set(file, rows);
  return rows;
}

/**
 * Rows (64 pixel counts each) of the file named by `STREAMINFER_DIGITS_CSV`, else of the
 * repository's digits data set; null when neither can be read.
 */
export function loadDigitsRows(repoRoot?: string): number[][] | null {
  for (const file of [
    process.env['STREAMINFER_DIGITS_CSV'],
    repoRoot ? digitsDataPath(repoRoot) : undefined,
  ]) {
    if (file === undefined) continue;
    const rows = digitsRowsOf(file);
    if (rows && rows.length > 0) return rows;
  }
  return null;
}

/**
 * Name of a model's input from `models/<name>/config.json`: the first input whose dtype is
 * `dtype` (any dtype when unset), or undefined when the config cannot be read.
 */
export function modelInputName(
  repoRoot: string | undefined,
  model: string,
  dtype?: string,
): string | undefined {
  if (!repoRoot) return undefined;
  try {
    const cfg = JSON.parse(fs.readFileSync(path.join(repoRoot, 'models', model, 'config.json'), 'utf8')) as {
      inputs?: { name?: unknown; dtype?: unknown }[];
    };
    const input = cfg.inputs?.find((i) => dtype === undefined || i.dtype === dtype);
    return typeof input?.name === 'string' ? input.name : undefined;
  } catch {
    return undefined;
  }
}

function floatTensor(name: string, values: number[]): BinaryPayload {
  return { tensors: [{ name, dtype: 'float32', dims: [values.length], data: Float32Array.from(values) }] };
}

/** Input length of a model from `models/<name>/config.json` (product of the first input's shape). */
export function modelInputSize(repoRoot: string | undefined, model: string): number | undefined {
  if (!repoRoot) return undefined;
  try {
    const cfg = JSON.parse(fs.readFileSync(path.join(repoRoot, 'models', model, 'config.json'), 'utf8')) as {
      inputs?: { shape?: unknown[] }[];
    };
    const shape = cfg.inputs?.[0]?.shape;
    if (!Array.isArray(shape) || shape.length === 0) return undefined;
    const dims = shape.map(Number);
    if (!dims.every((d) => Number.isInteger(d) && d > 0)) return undefined;
    return dims.reduce((a, b) => a * b, 1);
  } catch {
    return undefined;
  }
}

const WORDS = ['stream', 'infer', 'batch', 'tensor', 'socket', 'model', 'swap', 'epoch', 'queue', 'latency'];

export const BODY_KINDS: Record<string, BodyKind> = {
  'echo-floats': {
    name: 'echo-floats',
    description: '`{"id","model":"echo","input":[8 floats]}`',
    defaultModel: 'echo',
    create(conn, opts) {
      const rand = prng(0x5eed + conn);
      const n = opts.inputSize ?? 8;
      const pool = Array.from({ length: 16 }, () => floats(rand, n));
      return templated(opts, 'echo', 'input', pool);
    },
    binaryPool(conn, opts) {
      const rand = prng(0x5eed + conn);
      const n = opts.inputSize ?? 8;
      const name = modelInputName(opts.repoRoot, opts.model ?? 'echo') ?? 'input';
      return Array.from({ length: 16 }, () => floatTensor(name, floats(rand, n)));
    },
  },
  digits: {
    name: 'digits',
    description: '`{"id","model":"digits","input":[64 pixel counts 0-16]}` from the shared digits data',
    defaultModel: 'digits',
    create(conn, opts) {
      const rows = loadDigitsRows(opts.repoRoot);
      let pool: number[][];
      if (rows) {
        // each connection walks its own slice of the data set
        const start = (conn * 37) % rows.length;
        pool = Array.from({ length: Math.min(64, rows.length) }, (_, i) => rows[(start + i) % rows.length]!);
      } else {
        const rand = prng(0xd161 + conn);
        pool = Array.from({ length: 64 }, () => Array.from({ length: 64 }, () => Math.floor(rand() * 17)));
      }
      return templated(opts, 'digits', 'input', pool);
    },
    binaryPool(conn, opts) {
      const rows = loadDigitsRows(opts.repoRoot);
      const name = modelInputName(opts.repoRoot, opts.model ?? 'digits') ?? 'pixels';
      let pool: number[][];
      if (rows) {
        const start = (conn * 37) % rows.length;
        pool = Array.from({ length: Math.min(64, rows.length) }, (_, i) => rows[(start + i) % rows.length]!);
      } else {
        const rand = prng(0xd161 + conn);
        pool = Array.from({ length: 64 }, () => Array.from({ length: 64 }, () => Math.floor(rand() * 17)));
      }
      return pool.map((row) => floatTensor(name, row));
    },
  },
  'bench-model': {
    name: 'bench-model',
    description: '`{"id","model":"bench","input":[N floats]}`, N from models/bench/config.json (default 256)',
    defaultModel: 'bench',
    create(conn, opts) {
      const model = opts.model ?? 'bench';
      const n = opts.inputSize ?? modelInputSize(opts.repoRoot, model) ?? 256;
      const rand = prng(0xbe4c + conn);
      const pool = Array.from({ length: 8 }, () => floats(rand, n));
      return templated({ ...opts, model }, 'bench', 'input', pool);
    },
    binaryPool(conn, opts) {
      const model = opts.model ?? 'bench';
      const n = opts.inputSize ?? modelInputSize(opts.repoRoot, model) ?? 256;
      const name = modelInputName(opts.repoRoot, model) ?? 'features';
      const rand = prng(0xbe4c + conn);
      return Array.from({ length: 8 }, () => floatTensor(name, floats(rand, n)));
    },
  },
  text: {
    name: 'text',
    description: '`{"id","model":"upper","text":"..."}` (the text shape older clients send)',
    defaultModel: 'upper',
    create(conn, opts) {
      const rand = prng(0x7e47 + conn);
      const pool = Array.from({ length: 16 }, () =>
        Array.from({ length: 6 }, () => WORDS[Math.floor(rand() * WORDS.length)]).join(' '),
      );
      return templated(opts, 'upper', 'text', pool);
    },
    binaryPool(conn, opts) {
      const rand = prng(0x7e47 + conn);
      const name = modelInputName(opts.repoRoot, opts.model ?? 'upper') ?? 'text';
      return Array.from({ length: 16 }, () => ({
        tensors: [
          {
            name,
            dtype: 'string' as const,
            dims: [],
            data: [Array.from({ length: 6 }, () => WORDS[Math.floor(rand() * WORDS.length)]).join(' ')],
          },
        ],
      }));
    },
  },
};

export function bodyFactory(kind: string, conn: number, opts: BodyOptions = {}): BodyFn {
  const k = BODY_KINDS[kind];
  if (!k) throw new Error(`unknown body kind "${kind}" (known: ${Object.keys(BODY_KINDS).join(', ')})`);
  return k.create(conn, opts);
}

/** The frame prefix (magic, format version) every binary frame starts with, from libs/protocol itself. */
const FRAME_PREFIX = encodeBinaryFrame({}, []).subarray(0, 2);
export const BINARY_MAGIC_BYTE = FRAME_PREFIX[0]!;
export const BINARY_VERSION_BYTE = FRAME_PREFIX[1]!;

/** Width of the id slot in a binary request header: ids are written in place, padded with spaces. */
const ID_SLOT = 16;
/** 16-digit placeholder id the header template is built with (1e15). */
const ID_PLACEHOLDER = 10 ** (ID_SLOT - 1);

interface FrameTemplate {
  bytes: Buffer;
  /** offset of the id's digits in `bytes` */
  idAt: number;
  fields: Record<string, unknown>;
  tensors: BinaryTensor[];
}

function frameTemplate(fields: Record<string, unknown>, payload: BinaryPayload): FrameTemplate {
  const frame = encodeBinaryRequest(
    { id: ID_PLACEHOLDER, ...fields } as Parameters<typeof encodeBinaryRequest>[0],
    payload.tensors,
  );
  const bytes = Buffer.from(frame.buffer, frame.byteOffset, frame.byteLength);
  const needle = `"id":${ID_PLACEHOLDER}`;
  const at = bytes.indexOf(needle, 0, 'latin1');
  if (at < 0) throw new Error('binary request header has no id slot');
  return { bytes, idAt: at + needle.length - ID_SLOT, fields, tensors: payload.tensors };
}

/**
 * Binary tensor frames for body `kind`: the frames (header and tensor bytes) are built once per
 * connection from the kind's payload pool; per request only the id changes. The header JSON
 * carries the id in a fixed 16-character slot (`"id":123␠␠␠…`, JSON allows the spaces), so a
 * request is one copy of the template plus the id's digits. Ids wider than the slot fall back to
 * encoding the whole frame.
 */
export function binaryBodyFactory(kind: string, conn: number, opts: BodyOptions = {}): BinaryBodyFn {
  const k = BODY_KINDS[kind];
  if (!k) throw new Error(`unknown body kind "${kind}" (known: ${Object.keys(BODY_KINDS).join(', ')})`);
  if (!k.binaryPool) throw new Error(`body kind "${kind}" has no binary form`);
  const fields: Record<string, unknown> = { model: opts.model ?? k.defaultModel };
  if (opts.version !== undefined) fields['version'] = opts.version;
  Object.assign(fields, opts.extra ?? {});
  const templates = k.binaryPool(conn, opts).map((p) => frameTemplate(fields, p));
  const n = templates.length;
  if (n === 0) throw new Error(`body kind "${kind}" built no binary payloads`);
  return (id) => {
    const t = templates[id % n]!;
    const digits = String(id);
    if (digits.length > ID_SLOT) {
      const f = encodeBinaryRequest(
        { id, ...t.fields } as Parameters<typeof encodeBinaryRequest>[0],
        t.tensors,
      );
      return Buffer.from(f.buffer, f.byteOffset, f.byteLength);
    }
    const out = Buffer.allocUnsafe(t.bytes.length);
    t.bytes.copy(out);
    out.write(digits.padEnd(ID_SLOT, ' '), t.idAt, 'latin1');
    return out;
  };
}

/** What the load generator needs from a binary answer: its id and version, read from the header only. */
export interface BinaryAnswerHeader {
  id?: unknown;
  version?: unknown;
  type?: unknown;
  code?: unknown;
}

/**
 * Reads the JSON header of a binary answer frame (prefix: magic, version, u16 header length) and
 * nothing else: the tensor data is never decoded. Undefined when `data` is not a binary frame or
 * its header is not a JSON object.
 */
export function readBinaryAnswerHeader(data: Buffer): BinaryAnswerHeader | undefined {
  if (data.length < 4 || data[0] !== BINARY_MAGIC_BYTE || data[1] !== BINARY_VERSION_BYTE) return undefined;
  const length = data.readUInt16LE(2);
  if (4 + length > data.length) return undefined;
  try {
    const header = JSON.parse(data.toString('utf8', 4, 4 + length)) as unknown;
    return header !== null && typeof header === 'object' && !Array.isArray(header)
      ? (header as BinaryAnswerHeader)
      : undefined;
  } catch {
    return undefined;
  }
}

const RESULT_KEY = Buffer.from(',"result":');

/**
 * What the load generator needs from a JSON text answer (id, version; type and code for errors), read from the
 * text before `,"result":` only — the counterpart of readBinaryAnswerHeader, so a JSON run's client does not
 * decode and parse every answer's tensor while the binary run's skips it (both share the server's cores).
 * Errors and warnings carry no result and are parsed whole. Inside a JSON string a quote is always escaped, so
 * the first `,"result":` is the answer's own key; a prefix that still does not parse is read whole.
 */
export function readJsonAnswerHeader(data: Buffer): BinaryAnswerHeader | undefined {
  const at = data[0] === 0x7b ? data.indexOf(RESULT_KEY) : -1;
  try {
    const value = JSON.parse(at > 0 ? `${data.toString('utf8', 0, at)}}` : data.toString()) as unknown;
    return value !== null && typeof value === 'object' && !Array.isArray(value)
      ? (value as BinaryAnswerHeader)
      : undefined;
  } catch {
    if (at <= 0) return undefined;
  }
  // the prefix was not a whole object (a string holding the key): the answer as it is
  try {
    const value = JSON.parse(data.toString()) as unknown;
    return value !== null && typeof value === 'object' && !Array.isArray(value)
      ? (value as BinaryAnswerHeader)
      : undefined;
  } catch {
    return undefined;
  }
}
