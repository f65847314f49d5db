/**
 * docs/reference/errors.md lists every error code the product answers with or throws: each client-facing
 * code of libs/protocol (with its HTTP status in its row), and every code read out of the source — a
 * `readonly code = '…'` field, a `readonly code: 'a' | 'b'` field, a code union type (`…Code`, `…Failure` in
 * an errors.ts file), a warning's code. A code added to the code and not to the page fails here. One style
 * for all of them: every code is snake_case, every error class is defined in its folder's errors.ts.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import * as path from 'node:path';
import { ERROR_CODES, httpStatusOf } from '../../libs/protocol';

const REPO_ROOT = path.resolve(__dirname, '../../..');
const ERRORS_DOC = path.join(REPO_ROOT, 'docs/reference/errors.md');
/** Product code only: tests and their helpers define no codes the product uses. */
const PRODUCT_FILE = (name: string): boolean =>
  name.endsWith('.ts') &&
  !name.endsWith('.test.ts') &&
  !name.includes('.test-util.') &&
  !name.endsWith('.d.ts');

function walk(dir: string, out: string[] = []): string[] {
  if (!existsSync(dir)) return out;
  for (const name of readdirSync(dir)) {
    if (name === 'node_modules' || name === 'dist' || name.startsWith('.')) continue;
    const file = path.join(dir, name);
    if (statSync(file).isDirectory()) walk(file, out);
    else if (PRODUCT_FILE(name)) out.push(file);
  }
  return out;
}

/** The source without its comments, so a code named in a comment is not taken for one. */
function withoutComments(source: string): string {
  return source.replace(/\/\*[\s\S]*?\*\//g, '').replace(/(^|[^:'"`])\/\/.*$/gm, '$1');
}

const literals = (text: string): string[] =>
  [...text.matchAll(/'([A-Za-z_][A-Za-z0-9_]*)'/g)].map((m) => m[1]!);

/** Every code the source defines, with the file it was found in. */
function codesInSource(files: readonly string[]): Map<string, string> {
  const found = new Map<string, string>();
  const add = (code: string, file: string): void => {
    if (!found.has(code)) found.set(code, path.relative(REPO_ROOT, file));
  };
  for (const file of files) {
    const source = withoutComments(readFileSync(file, 'utf8'));
    // readonly code = 'x' (as const)
    for (const m of source.matchAll(/\breadonly\s+code\s*=\s*'([^']+)'/g)) add(m[1]!, file);
    // readonly code: 'a' | 'b' (a constructor parameter or a field)
    for (const m of source.matchAll(/\breadonly\s+code\s*:\s*((?:\s*\|?\s*'[^']+')+)/g))
      for (const code of literals(m[1]!)) add(code, file);
    // export type SomethingCode = | 'a' | 'b'; (and a lib's failure kinds in its errors.ts)
    const unionNames = /errors\.ts$/.test(file) ? /\w+(?:Code|Failure)/ : /\w+ErrorCode/;
    const union = new RegExp(`export\\s+type\\s+(${unionNames.source})\\s*=([^;]*);`, 'g');
    for (const m of source.matchAll(union)) {
      const body = m[2]!;
      // Only unions of string literals: `(typeof X)[number]` and the like are read elsewhere.
      if (!/^\s*\|?\s*'[^']+'(\s*\|\s*'[^']+')*\s*$/.test(body)) continue;
      for (const code of literals(body)) add(code, file);
    }
    // Warning frames: encodeWarning('code', …) and the named warning constants.
    for (const m of source.matchAll(/encodeWarning\(\s*'([^']+)'/g)) add(m[1]!, file);
    for (const m of source.matchAll(/export const CONSUMER_[A-Z_]+\s*=\s*'([^']+)'/g)) add(m[1]!, file);
  }
  return found;
}

describe('docs/reference/errors.md', () => {
  const doc = readFileSync(ERRORS_DOC, 'utf8');
  const rows = doc.split('\n').filter((line) => line.startsWith('|'));
  const files = ['apps', 'libs'].flatMap((dir) => walk(path.join(REPO_ROOT, dir)));

  it('has a row for every client error code, with its HTTP status', () => {
    const wrong = ERROR_CODES.filter((code) => {
      const row = rows.find((r) => r.startsWith(`| \`${code}\``));
      return row?.split('|')[2]?.trim() !== String(httpStatusOf(code));
    });
    expect(wrong).toEqual([]);
  });

  it('names every code the source defines', () => {
    const codes = codesInSource(files);
    // The extraction itself still finds each kind of definition: a field, a field union, a type union, a warning.
    for (const known of ['invalid_config', 'not_found', 'ring_corrupt', 'delivery_gap', 'slow_consumer'])
      expect(codes.has(known)).toBe(true);
    expect(codes.size).toBeGreaterThan(50);
    const missing = [...codes]
      .filter(([code]) => !doc.includes(`\`${code}\``))
      .map(([c, f]) => `${c} (${f})`);
    expect(missing).toEqual([]);
  });

  it('has snake_case codes only', () => {
    const odd = [...codesInSource(files)]
      .filter(([code]) => !/^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$/.test(code))
      .map(([c, f]) => `${c} (${f})`);
    expect(odd).toEqual([]);
  });

  it('defines every error class in an errors.ts', () => {
    const outside = files
      .filter((file) => path.basename(file) !== 'errors.ts')
      .filter((file) =>
        /\bclass\s+\w+\s+extends\s+\w*Error\b/.test(withoutComments(readFileSync(file, 'utf8'))),
      )
      .map((file) => path.relative(REPO_ROOT, file));
    expect(outside).toEqual([]);
  });
});
