/**
 * The model configs the scripts write: the product's `config.json` shape (libs/registry ModelConfigFile) with
 * name and description always given, a serializer with a fixed key order, so regenerated files are
 * byte-identical, and validation: the product's own checks (parseModelConfig) on the bytes written, then the
 * stricter rules of the shipped models.
 */
import type { ModelBatchingFile, ModelConfigFile } from '../../libs/registry';
import { parseModelConfig } from '../../libs/registry';

/** A config.json as the scripts write it (the older `latency_slo_ms` is never written). */
export type ModelConfig = Omit<ModelConfigFile, 'name' | 'description' | 'batching'> & {
  name: string;
  description: string;
  batching?: Omit<ModelBatchingFile, 'latency_slo_ms'>;
};

const TOP_KEYS = [
  'name',
  'description',
  'inputs',
  'outputs',
  'labels',
  'batching',
  'default_version',
] as const;
const TENSOR_KEYS = ['name', 'dtype', 'shape', 'optional', 'from'] as const;
const BATCHING_KEYS = [
  'policy',
  'max_batch_size',
  'max_queue_delay_ms',
  'preferred_batch_sizes',
  'slo_p99_ms',
] as const;

function pick<T extends object>(obj: T, keys: readonly string[]): Record<string, unknown> {
  const extra = Object.keys(obj).filter((k) => !keys.includes(k));
  if (extra.length > 0) throw new Error(`config: unknown key(s) ${extra.join(', ')}`);
  const out: Record<string, unknown> = {};
  const rec = obj as Record<string, unknown>;
  for (const k of keys) if (rec[k] !== undefined) out[k] = rec[k];
  return out;
}

/**
 * JSON with stable key order, laid out exactly as `biome format` lays out JSON (line width
 * 110, 2-space indent): a value goes on one line when it fits, otherwise each entry gets its
 * own line. So `npm run lint` accepts the generated files unchanged.
 */
export function serializeConfig(cfg: ModelConfig): string {
  const ordered = pick(cfg, TOP_KEYS);
  ordered['inputs'] = cfg.inputs.map((t) => pick(t, TENSOR_KEYS));
  ordered['outputs'] = cfg.outputs.map((t) => pick(t, TENSOR_KEYS));
  if (cfg.batching) ordered['batching'] = pick(cfg.batching, BATCHING_KEYS);
  return `${layout(ordered, '', '', '')}\n`;
}

const LINE_WIDTH = 110;

function flat(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(flat).join(', ')}]`;
  if (v !== null && typeof v === 'object') {
    const entries = Object.entries(v as Record<string, unknown>);
    if (entries.length === 0) return '{}';
    return `{ ${entries.map(([k, x]) => `${JSON.stringify(k)}: ${flat(x)}`).join(', ')} }`;
  }
  return JSON.stringify(v);
}

/** `prefix` (e.g. `"key": `) and `suffix` (`,` or nothing) share the line with the value. */
function layout(v: unknown, indent: string, prefix: string, suffix: string): string {
  const one = flat(v);
  const isContainer = v !== null && typeof v === 'object';
  if (!isContainer || indent.length + prefix.length + one.length + suffix.length <= LINE_WIDTH) return one;
  const inner = `${indent}  `;
  if (Array.isArray(v)) {
    if (v.length === 0) return '[]';
    const items = v.map((x, i) => inner + layout(x, inner, '', i < v.length - 1 ? ',' : ''));
    return `[\n${items.map((line, i) => (i < v.length - 1 ? `${line},` : line)).join('\n')}\n${indent}]`;
  }
  const entries = Object.entries(v as Record<string, unknown>);
  const lines = entries.map(([k, x], i) => {
    const key = `${JSON.stringify(k)}: `;
    const comma = i < entries.length - 1 ? ',' : '';
    return `${inner}${key}${layout(x, inner, key, comma)}${comma}`;
  });
  return `{\n${lines.join('\n')}\n${indent}}`;
}

/**
 * Validates what is written: the server's own checks (libs/registry parseModelConfig, RepositoryError) on the
 * serialized bytes, then the invariants the shipped models keep; throws on the first problem.
 */
export function validateConfig(cfg: ModelConfig): void {
  parseModelConfig(JSON.parse(serializeConfig(cfg)), `${cfg.name}/config.json`, cfg.name);
  const inputNames = new Set(cfg.inputs.map((t) => t.name));
  for (const t of cfg.outputs) {
    if (t.optional) throw new Error(`${cfg.name}: output ${t.name} cannot be optional`);
    if (t.from !== undefined && !inputNames.has(t.from)) {
      throw new Error(`${cfg.name}: output ${t.name} is from unknown input ${t.from}`);
    }
  }
  for (const t of cfg.inputs)
    if (t.from !== undefined) throw new Error(`${cfg.name}: input ${t.name} has 'from'`);
  if (cfg.labels) {
    const first = cfg.outputs[0];
    if (first?.shape.length !== 1 || first.shape[0] !== cfg.labels.length) {
      throw new Error(`${cfg.name}: labels need a first output of shape [${cfg.labels.length}]`);
    }
  }
}
