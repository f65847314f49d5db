import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import * as path from 'node:path';
import type { ModelSignature, TensorSpec } from '../protocol';
import { ProtocolError, parseSignature } from '../protocol';
import { RepositoryError } from './errors';

/** Per-model batching settings from config.json (snake_case as written there). */
export interface ModelBatchingConfig {
  policy?: 'fixed' | 'greedy' | 'adaptive';
  maxBatchSize?: number;
  maxQueueDelayMs?: number;
  preferredBatchSizes?: number[];
  /** The p99 latency objective (ms): `slo_p99_ms` (or its older name `latency_slo_ms`). */
  sloP99Ms?: number;
}

/**
 * A model's `config.json` as written on disk (snake_case): what readModel reads and what scripts/build-models
 * writes. parseModelConfig checks one.
 */
export interface ModelConfigFile {
  /** When present, the model directory's name. */
  name?: string;
  description?: string;
  inputs: TensorSpec[];
  outputs: TensorSpec[];
  /** Classifiers: answers carry `label` and `probabilities` from the first output. */
  labels?: string[];
  batching?: ModelBatchingFile;
  default_version?: string;
}

export interface ModelBatchingFile {
  /** Absent: adaptive when an objective applies, else the server's default policy. */
  policy?: 'fixed' | 'greedy' | 'adaptive';
  max_batch_size?: number;
  max_queue_delay_ms?: number;
  preferred_batch_sizes?: number[];
  /** The p99 latency objective (ms). */
  slo_p99_ms?: number;
  /** The older name of slo_p99_ms. */
  latency_slo_ms?: number;
}

/** What a config.json says, checked (versions apart: those are the directory's). */
export interface ModelConfigParsed {
  description: string;
  signature: ModelSignature;
  batching: ModelBatchingConfig;
  /** default_version as written (readModel checks it names a version). */
  defaultVersion?: string;
}

export interface ModelVersionEntry {
  version: string;
  file: string;
}

export interface ModelEntry {
  name: string;
  description: string;
  dir: string;
  signature: ModelSignature;
  batching: ModelBatchingConfig;
  versions: ModelVersionEntry[];
  defaultVersion: string;
}

const NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

/** Whether `name` can be a model or version directory of a repository. */
export function isRepositoryName(name: string): boolean {
  return NAME_PATTERN.test(name);
}

/** A model directory that cannot be served as a whole (its config.json, or no version file): why. */
export interface BrokenModel {
  name: string;
  dir: string;
  reason: string;
}

/**
 * Reads every `<dir>/<model>/config.json` and its `<version>/model.onnx` files. Any malformed model stops the scan with a message naming the file.
 * With `cache` (versions pulled from a fleet: `<cache>/<model>/…`), both are read as one repository (see readModel).
 */
export function scanRepository(dir: string, cache?: string): ModelEntry[] {
  const scan = scanRepositoryDetailed(dir, cache);
  const [broken] = scan.broken;
  if (broken) throw new RepositoryError(broken.reason);
  return scan.models;
}

/**
 * The scan that loads what loads: each model that cannot be read is one entry of `broken` (with the message
 * scanRepository would stop with) and the others are read. Throws only when `dir` is not a directory, or when
 * the repository holds no model directory at all.
 */
export function scanRepositoryDetailed(
  dir: string,
  cache?: string,
): { models: ModelEntry[]; broken: BrokenModel[] } {
  const root = path.resolve(dir);
  if (!existsSync(root) || !statSync(root).isDirectory())
    throw new RepositoryError(`model repository ${root} is not a directory`);
  const cacheRoot = cache === undefined ? undefined : path.resolve(cache);
  const names = new Set(modelDirs(root));
  if (cacheRoot && existsSync(cacheRoot)) for (const name of modelDirs(cacheRoot)) names.add(name);
  const models: ModelEntry[] = [];
  const broken: BrokenModel[] = [];
  for (const name of [...names].sort()) {
    const modelDir = path.join(root, name);
    try {
      models.push(readModel(modelDir, name, cacheRoot && path.join(cacheRoot, name)));
    } catch (error) {
      broken.push({ name, dir: modelDir, reason: (error as Error).message });
    }
  }
  if (models.length === 0 && broken.length === 0)
    throw new RepositoryError(`model repository ${root} holds no model (expected <name>/config.json)`);
  return { models, broken };
}

/** The model directories of one root: those holding a config.json. */
function modelDirs(root: string): string[] {
  return readdirSync(root).filter((name) => {
    const modelDir = path.join(root, name);
    return statSync(modelDir).isDirectory() && existsSync(path.join(modelDir, 'config.json'));
  });
}

/** The version files of one model directory (absent directory: none). */
function versionFiles(modelDir: string | undefined): Map<string, string> {
  const files = new Map<string, string>();
  if (modelDir === undefined || !existsSync(modelDir)) return files;
  for (const entry of readdirSync(modelDir)) {
    const file = path.join(modelDir, entry, 'model.onnx');
    if (NAME_PATTERN.test(entry) && existsSync(file)) files.set(entry, file);
  }
  return files;
}

/**
 * One model. With `pulledDir` (the model's directory in the pull cache): the versions of both directories, a
 * version in both read from the cache (it holds only bytes verified against the fleet's store, pulled because
 * the repository lacked or differed from them); config.json from the repository, else from the cache.
 */
export function readModel(modelDir: string, name: string, pulledDir?: string): ModelEntry {
  const configDir =
    pulledDir !== undefined && !existsSync(path.join(modelDir, 'config.json')) ? pulledDir : modelDir;
  const configPath = path.join(configDir, 'config.json');
  if (!NAME_PATTERN.test(name))
    throw new RepositoryError(`${configPath}: model directory name "${name}" is not a valid model name`);
  let raw: Record<string, unknown>;
  try {
    raw = JSON.parse(readFileSync(configPath, 'utf8')) as Record<string, unknown>;
  } catch (error) {
    throw new RepositoryError(`${configPath}: ${(error as Error).message}`);
  }
  const signature = checkConfigHead(raw, configPath, name);
  const files = versionFiles(modelDir);
  for (const [version, file] of versionFiles(pulledDir)) files.set(version, file);
  const versions = [...files.keys()]
    .sort(compareVersions)
    .map((version) => ({ version, file: files.get(version)! }));
  if (versions.length === 0)
    throw new RepositoryError(`${configDir}: no version directory with a model.onnx`);
  const defaultVersion =
    raw.default_version === undefined ? versions[versions.length - 1]!.version : String(raw.default_version);
  if (!versions.some((entry) => entry.version === defaultVersion)) {
    throw new RepositoryError(`${configPath}: default_version "${defaultVersion}" has no model.onnx`);
  }
  return {
    name,
    description: typeof raw.description === 'string' ? raw.description : '',
    dir: configDir,
    signature,
    batching: readBatching(raw.batching, configPath),
    versions,
    defaultVersion,
  };
}

/**
 * Checks a config.json's content as readModel does (the same checks, the same messages), for the model
 * directory `name`: what scripts that write model configs validate them with. Throws RepositoryError.
 */
export function parseModelConfig(raw: unknown, configPath: string, name: string): ModelConfigParsed {
  const signature = checkConfigHead(raw, configPath, name);
  const config = raw as Record<string, unknown>;
  const parsed: ModelConfigParsed = {
    description: typeof config.description === 'string' ? config.description : '',
    signature,
    batching: readBatching(config.batching, configPath),
  };
  if (config.default_version !== undefined) parsed.defaultVersion = String(config.default_version);
  return parsed;
}

/** A JSON object, its name (if any) the directory's, and a valid tensor signature. */
function checkConfigHead(raw: unknown, configPath: string, name: string): ModelSignature {
  if (typeof raw !== 'object' || raw === null) throw new RepositoryError(`${configPath}: not a JSON object`);
  const config = raw as Record<string, unknown>;
  if (config.name !== undefined && config.name !== name) {
    throw new RepositoryError(
      `${configPath}: "name" is "${String(config.name)}" but the directory is "${name}"`,
    );
  }
  try {
    return parseSignature(config, 'config.json');
  } catch (error) {
    const message = error instanceof ProtocolError ? error.message : String(error);
    throw new RepositoryError(`${configPath}: ${message}`);
  }
}

/** `slo_p99_ms`, or `latency_slo_ms`: its older name (one of the two). */
function readObjective(batching: Record<string, unknown>, configPath: string): number | undefined {
  if (batching.slo_p99_ms !== undefined && batching.latency_slo_ms !== undefined) {
    throw new RepositoryError(
      `${configPath}: batching.latency_slo_ms is the older name of batching.slo_p99_ms: give one`,
    );
  }
  const key = batching.slo_p99_ms !== undefined ? 'slo_p99_ms' : 'latency_slo_ms';
  const slo = batching[key];
  if (slo === undefined) return undefined;
  if (typeof slo !== 'number' || !Number.isFinite(slo) || slo <= 0 || slo > 3_600_000) {
    throw new RepositoryError(
      `${configPath}: batching.${key} must be a number of ms above 0, at most 3600000`,
    );
  }
  return slo;
}

function readBatching(raw: unknown, configPath: string): ModelBatchingConfig {
  if (raw === undefined || raw === null) return {};
  if (typeof raw !== 'object') throw new RepositoryError(`${configPath}: "batching" must be an object`);
  const batching = raw as Record<string, unknown>;
  const result: ModelBatchingConfig = {};
  if (batching.policy !== undefined) {
    if (batching.policy !== 'fixed' && batching.policy !== 'greedy' && batching.policy !== 'adaptive') {
      throw new RepositoryError(`${configPath}: batching.policy must be fixed, greedy or adaptive`);
    }
    result.policy = batching.policy;
  }
  const positiveInt = (key: string): number | undefined => {
    const value = batching[key];
    if (value === undefined) return undefined;
    if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > 4096) {
      throw new RepositoryError(`${configPath}: batching.${key} must be an integer between 1 and 4096`);
    }
    return value;
  };
  const maxBatch = positiveInt('max_batch_size');
  if (maxBatch !== undefined) result.maxBatchSize = maxBatch;
  const delay = batching.max_queue_delay_ms;
  if (delay !== undefined) {
    if (typeof delay !== 'number' || !Number.isFinite(delay) || delay < 0 || delay > 60000) {
      throw new RepositoryError(`${configPath}: batching.max_queue_delay_ms must be between 0 and 60000`);
    }
    result.maxQueueDelayMs = delay;
  }
  const slo = readObjective(batching, configPath);
  if (slo !== undefined) result.sloP99Ms = slo;
  if (batching.preferred_batch_sizes !== undefined) {
    const sizes = batching.preferred_batch_sizes;
    if (!Array.isArray(sizes) || !sizes.every((size) => Number.isInteger(size) && size >= 1)) {
      throw new RepositoryError(
        `${configPath}: batching.preferred_batch_sizes must be an array of positive integers`,
      );
    }
    result.preferredBatchSizes = sizes as number[];
  }
  return result;
}

/** Numeric versions sort numerically ("2" < "10"); others lexically after them. */
export function compareVersions(a: string, b: string): number {
  const numA = /^\d+$/.test(a) ? Number(a) : Number.NaN;
  const numB = /^\d+$/.test(b) ? Number(b) : Number.NaN;
  if (!Number.isNaN(numA) && !Number.isNaN(numB)) return numA - numB;
  if (!Number.isNaN(numA)) return -1;
  if (!Number.isNaN(numB)) return 1;
  return a < b ? -1 : a > b ? 1 : 0;
}
