/**
 * Builds the shipped model repository (`models/`) deterministically:
 *
 *   models/<name>/config.json
 *   models/<name>/<version>/model.onnx
 *
 * Usage (after `npm run build`; `npm run models` does both):
 *
 *   node dist/scripts/build-models.js [--only digits,bench] [--data data/digits.csv.gz]
 *                                     [--out models] [--check]
 *
 * Relative --data and --out paths are resolved against the repository root, not the
 * current directory. --check writes nothing and exits 1 when a file would change.
 * Same inputs → same bytes: no timestamps, seeded PRNGs, stable key order.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import { Command } from 'commander';
import { buildBench } from './models/bench';
import { serializeConfig, validateConfig } from './models/config';
import { buildDelayRisk } from './models/delay-risk';
import { buildDigits } from './models/digits';
import { DIGITS_DATA_FILE } from './models/digits-data';
import { buildEcho } from './models/echo';
import type { BuiltModel } from './models/types';
import { buildUpper } from './models/upper';

export const MODEL_NAMES = ['echo', 'upper', 'digits', 'bench', 'delay-risk'] as const;
export type ModelName = (typeof MODEL_NAMES)[number];

export const DEFAULT_DATA = DIGITS_DATA_FILE;

/** The repository root: the nearest ancestor of this file holding package.json. */
export function repoRoot(from = __dirname): string {
  let dir = from;
  for (;;) {
    if (existsSync(path.join(dir, 'package.json'))) return dir;
    const up = path.dirname(dir);
    if (up === dir) throw new Error(`no package.json above ${from}`);
    dir = up;
  }
}

export interface BuildOptions {
  only: ModelName[];
  dataPath: string;
  outDir: string;
  check: boolean;
  log: (line: string) => void;
}

export async function buildModel(
  name: ModelName,
  opts: Pick<BuildOptions, 'dataPath' | 'log'>,
): Promise<BuiltModel> {
  switch (name) {
    case 'echo':
      return buildEcho();
    case 'upper':
      return buildUpper();
    case 'digits':
      return buildDigits(opts.dataPath, opts.log);
    case 'bench':
      return buildBench();
    case 'delay-risk':
      return buildDelayRisk(opts.log);
  }
}

type FileState = 'created' | 'updated' | 'unchanged';

function writeIfChanged(file: string, content: Uint8Array | string, check: boolean): FileState {
  const bytes = typeof content === 'string' ? Buffer.from(content, 'utf8') : Buffer.from(content);
  const old = existsSync(file) ? readFileSync(file) : null;
  const state: FileState = old === null ? 'created' : old.equals(bytes) ? 'unchanged' : 'updated';
  if (state !== 'unchanged' && !check) {
    mkdirSync(path.dirname(file), { recursive: true });
    writeFileSync(file, bytes);
  }
  return state;
}

/** Builds the selected models; returns the number of files that differ(ed) from what was on disk. */
export async function buildModels(opts: BuildOptions): Promise<number> {
  let changed = 0;
  for (const name of opts.only) {
    const t0 = Date.now();
    const built = await buildModel(name, opts);
    validateConfig(built.config);
    if (built.config.name !== name)
      throw new Error(`builder for ${name} produced config ${built.config.name}`);
    const dir = path.join(opts.outDir, name);
    const files: [string, Uint8Array | string][] = [
      ['config.json', serializeConfig(built.config)],
      ...Object.keys(built.versions)
        .sort()
        .map((v): [string, Uint8Array] => [path.join(v, 'model.onnx'), built.versions[v]!]),
      ...Object.keys(built.files ?? {})
        .sort()
        .map((f): [string, string] => [f, built.files![f]!]),
    ];
    if (built.config.default_version !== undefined && !(built.config.default_version in built.versions)) {
      throw new Error(`${name}: default_version ${built.config.default_version} is not built`);
    }
    for (const line of built.summary) opts.log(line);
    for (const [rel, content] of files) {
      const state = writeIfChanged(path.join(dir, rel), content, opts.check);
      if (state !== 'unchanged') changed++;
      const size = typeof content === 'string' ? Buffer.byteLength(content) : content.length;
      opts.log(`  ${path.join(name, rel).padEnd(22)} ${String(size).padStart(10)} B  ${state}`);
    }
    opts.log(`  (${name}: ${((Date.now() - t0) / 1000).toFixed(1)} s)`);
  }
  return changed;
}

function parseOnly(value: string, previous: ModelName[] = []): ModelName[] {
  const names = value
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  for (const n of names) {
    if (!(MODEL_NAMES as readonly string[]).includes(n)) {
      throw new Error(`unknown model "${n}" (known: ${MODEL_NAMES.join(', ')})`);
    }
  }
  return [...previous, ...(names as ModelName[])];
}

async function main(argv: string[]): Promise<void> {
  const program = new Command()
    .name('build-models')
    .description('Build the shipped model repository deterministically')
    .option('--only <names>', `comma-separated subset of ${MODEL_NAMES.join(', ')} (repeatable)`, parseOnly)
    .option('--data <path>', 'digits.csv.gz (relative paths: from the repository root)', DEFAULT_DATA)
    .option('--out <dir>', 'model repository directory (relative paths: from the repository root)', 'models')
    .option('--check', 'write nothing; exit 1 if any file would change', false)
    .parse(argv);
  const o = program.opts<{ only?: ModelName[]; data: string; out: string; check: boolean }>();
  const root = repoRoot();
  const only =
    o.only && o.only.length > 0 ? MODEL_NAMES.filter((n) => o.only!.includes(n)) : [...MODEL_NAMES];
  const outDir = path.resolve(root, o.out);
  const log = (line: string) => console.log(line);
  log(`building ${only.join(', ')} into ${outDir}${o.check ? ' (check only)' : ''}`);
  const changed = await buildModels({
    only,
    dataPath: path.resolve(root, o.data),
    outDir,
    check: o.check,
    log,
  });
  if (o.check && changed > 0) {
    console.error(`${changed} file(s) out of date; run \`npm run models\``);
    process.exitCode = 1;
  } else {
    log(o.check ? 'all model files up to date' : `done: ${changed} file(s) written`);
  }
}

if (require.main === module) {
  main(process.argv).catch((err: unknown) => {
    console.error(err instanceof Error ? err.message : err);
    process.exit(1);
  });
}
