/**
 * The layering rules of the repository and the checker behind test/repo/layers.test.ts. Pure over a map of
 * repo-relative paths to source text, so the test can feed it synthetic violations too.
 *
 * - libs/ imports only libs/; another lib only through its index.ts.
 * - apps/ imports libs/ and the apps below it in the process stack `cli → supervisor | pipeline → node →
 *   worker` (supervisor and pipeline share through libs/), never scripts/, loadtest/ or test/.
 * - scripts/ imports libs/ and deploy/ (the typed dashboard it renders); deploy/ only libs/.
 * - loadtest/ imports apps/, libs/ and scripts/; test/ imports anything; nothing else imports test/.
 * - Product code never imports a test-only file (*.test.ts, *.test-util.ts, ring-test-worker.ts) and reads
 *   `STREAMINFER_TEST_*` only in libs/test-hooks. No import circles between files (type-only imports count).
 * An import is any static or type import, `export … from`, `import()`, `require()`, or a path built from
 * `__dirname` that names one of our sources (a worker thread or child process started from it).
 */
import * as path from 'node:path';
import * as ts from 'typescript';

/** How an app sits in the process stack: an app may import only apps of a lower rank. */
export const APP_RANK: Readonly<Record<string, number>> = {
  cli: 4,
  supervisor: 3,
  pipeline: 3,
  node: 2,
  worker: 1,
};
export const APP_ORDER = 'cli → supervisor | pipeline → node → worker';

/** The one product module allowed to read `STREAMINFER_TEST_*` variables. */
export const TEST_HOOKS_MODULE = 'libs/test-hooks/index.ts';

export type ImportKind = 'import' | 'type' | 'export' | 'dynamic' | 'require' | 'spawn';

export interface Edge {
  from: string;
  /** Repo-relative path of the .ts file imported (or started as a worker/child process). */
  to: string;
  spec: string;
  line: number;
  kind: ImportKind;
}

export interface Violation {
  rule: Rule;
  file: string;
  line: number;
  detail: string;
  /** The edge (`from → to`) or circle (`a ⇄ b`) an allow-list entry would name. */
  key?: string;
}

export type Rule =
  | 'libs-down'
  | 'apps-down'
  | 'app-order'
  | 'scripts-down'
  | 'test-only'
  | 'lib-index'
  | 'circle'
  | 'test-env'
  | 'shipped'
  | 'unresolved';

type Zone = 'libs' | 'apps' | 'scripts' | 'loadtest' | 'test' | 'deploy';

/** Files that exist only for tests: never imported by product code and never in the shipped build. */
export function isTestOnly(file: string): boolean {
  return (
    file.startsWith('test/') ||
    /\.test\.ts$/.test(file) ||
    /\.test-util\.ts$/.test(file) ||
    /(^|\/)ring-test-worker\.ts$/.test(file)
  );
}

function zoneOf(file: string): Zone {
  const top = file.split('/')[0] as Zone;
  return top;
}

/** `libs/ring/x.ts` → `ring`; `apps/node/x.ts` → `node`. */
function unitOf(file: string): string {
  return file.split('/')[1] ?? '';
}

/** Resolves a relative specifier the way TypeScript/Node do for this repository (.ts, .js → .ts, index.ts). */
export function resolveSpec(
  from: string,
  spec: string,
  exists: (file: string) => boolean,
): string | undefined {
  if (!spec.startsWith('.')) return undefined;
  const base = path.posix.normalize(path.posix.join(path.posix.dirname(from), spec)).replace(/\/$/, '');
  const stem = base.replace(/\.js$/, '');
  for (const candidate of [`${stem}.ts`, `${stem}/index.ts`, base]) {
    if (exists(candidate)) return candidate;
  }
  return undefined;
}

/**
 * `path.join(__dirname, '../worker/worker.js')`, `join(__dirname, 'main.js')`, `path.resolve(__dirname, ...)`:
 * the repo-relative source path of the file such a call names, when every part after `__dirname` is a literal.
 */
function dirnamePath(node: ts.Expression): string | undefined {
  if (!ts.isCallExpression(node)) return undefined;
  const callee = node.expression;
  const name = ts.isPropertyAccessExpression(callee)
    ? callee.name.text
    : ts.isIdentifier(callee)
      ? callee.text
      : '';
  if (name !== 'join' && name !== 'resolve') return undefined;
  const [first, ...rest] = node.arguments;
  if (!first || !ts.isIdentifier(first) || first.text !== '__dirname' || rest.length === 0) return undefined;
  const parts: string[] = [];
  for (const arg of rest) {
    if (!ts.isStringLiteralLike(arg)) return undefined;
    parts.push(arg.text);
  }
  const joined = path.posix.join(...parts);
  return joined.startsWith('.') ? joined : `./${joined}`;
}

/** Every import of one file: static, type-only, re-exports, `import()`, `require()`, and worker/process starts. */
export function scanImports(
  file: string,
  text: string,
  exists: (file: string) => boolean,
): {
  edges: Edge[];
  unresolved: Violation[];
} {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.ES2022, false, ts.ScriptKind.TS);
  const edges: Edge[] = [];
  const unresolved: Violation[] = [];
  const add = (spec: string, at: ts.Node, kind: ImportKind): void => {
    // Data files (package.json) are read, not layered; packages are outside the rules.
    if (!spec.startsWith('.') || spec.endsWith('.json')) return;
    const line = source.getLineAndCharacterOfPosition(at.getStart(source)).line + 1;
    const to = resolveSpec(file, spec, exists);
    if (to === undefined) {
      // A started file may be built elsewhere (a .js beside the sources); an import must resolve.
      if (kind !== 'spawn')
        unresolved.push({ rule: 'unresolved', file, line, detail: `${spec} resolves to no file` });
      return;
    }
    edges.push({ from: file, to, spec, line, kind });
  };
  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node) && ts.isStringLiteral(node.moduleSpecifier)) {
      const typeOnly =
        node.importClause?.isTypeOnly === true ||
        (node.importClause !== undefined &&
          node.importClause.name === undefined &&
          node.importClause.namedBindings !== undefined &&
          ts.isNamedImports(node.importClause.namedBindings) &&
          node.importClause.namedBindings.elements.length > 0 &&
          node.importClause.namedBindings.elements.every((e) => e.isTypeOnly));
      add(node.moduleSpecifier.text, node, typeOnly ? 'type' : 'import');
    } else if (
      ts.isExportDeclaration(node) &&
      node.moduleSpecifier &&
      ts.isStringLiteral(node.moduleSpecifier)
    ) {
      add(node.moduleSpecifier.text, node, node.isTypeOnly ? 'type' : 'export');
    } else if (
      ts.isImportEqualsDeclaration(node) &&
      ts.isExternalModuleReference(node.moduleReference) &&
      ts.isStringLiteral(node.moduleReference.expression)
    ) {
      add(node.moduleReference.expression.text, node, 'require');
    } else if (ts.isImportTypeNode(node)) {
      const arg = node.argument;
      if (ts.isLiteralTypeNode(arg) && ts.isStringLiteral(arg.literal)) add(arg.literal.text, node, 'type');
    } else if (ts.isCallExpression(node)) {
      const [arg] = node.arguments;
      if (node.expression.kind === ts.SyntaxKind.ImportKeyword && arg && ts.isStringLiteralLike(arg)) {
        add(arg.text, node, 'dynamic');
      } else if (ts.isIdentifier(node.expression) && node.expression.text === 'require' && arg) {
        const spec = ts.isStringLiteralLike(arg) ? arg.text : dirnamePath(arg);
        if (spec) {
          add(spec, node, 'require');
          return;
        }
      } else {
        // fork(path.join(__dirname, '../node/main.js')), new Worker(join(__dirname, 'lease-thread.js')),
        // new Piscina({ filename: path.join(__dirname, '../worker/worker.js') }), a test's CLI path: any
        // path built from __dirname that names one of our sources ties this file to it.
        const spec = dirnamePath(node);
        if (spec) {
          add(spec, node, 'spawn');
          return;
        }
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return { edges, unresolved };
}

/**
 * Known violations a change may allow while it moves code in steps: each entry names one edge (`from → to`) or
 * one circle (its files, sorted, joined by ` ⇄ `). The repository's own list is empty.
 */
export interface Allowed {
  edges: ReadonlySet<string>;
  circles: ReadonlySet<string>;
}

export const NOTHING_ALLOWED: Allowed = { edges: new Set(), circles: new Set() };

export function edgeKey(from: string, to: string): string {
  return `${from} → ${to}`;
}

function layerRule(e: Edge): { rule: Rule; why: string } | undefined {
  const fromZone = zoneOf(e.from);
  const toZone = zoneOf(e.to);
  if (toZone === 'test' && fromZone !== 'test') return { rule: 'test-only', why: 'only test/ imports test/' };
  if (isTestOnly(e.to) && !isTestOnly(e.from) && fromZone !== 'loadtest')
    return { rule: 'test-only', why: 'product code imports a test-only file' };
  switch (fromZone) {
    case 'libs':
      if (toZone !== 'libs') return { rule: 'libs-down', why: `libs never import ${toZone}/` };
      return undefined;
    case 'apps':
      if (toZone === 'libs') return undefined;
      if (toZone !== 'apps') return { rule: 'apps-down', why: `apps never import ${toZone}/` };
      if (unitOf(e.from) === unitOf(e.to)) return undefined;
      if ((APP_RANK[unitOf(e.to)] ?? 99) >= (APP_RANK[unitOf(e.from)] ?? 0))
        return {
          rule: 'app-order',
          why: `apps/${unitOf(e.from)} may not import apps/${unitOf(e.to)} (${APP_ORDER})`,
        };
      return undefined;
    case 'scripts':
      // deploy/ holds typed configuration (the Grafana dashboard) that a script renders.
      if (toZone !== 'libs' && toZone !== 'scripts' && toZone !== 'deploy')
        return {
          rule: 'scripts-down',
          why: `scripts/ imports only libs/, deploy/ and scripts/, not ${toZone}/`,
        };
      return undefined;
    case 'deploy':
      if (toZone !== 'libs' && toZone !== 'deploy')
        return { rule: 'scripts-down', why: `deploy/ imports only libs/ and deploy/, not ${toZone}/` };
      return undefined;
    default:
      return undefined;
  }
}

/** A lib's files outside its folder are reached only through `libs/<name>/index.ts`. */
function indexRule(e: Edge): string | undefined {
  if (zoneOf(e.to) !== 'libs') return undefined;
  const lib = unitOf(e.to);
  if (zoneOf(e.from) === 'libs' && unitOf(e.from) === lib) return undefined;
  if (e.to === `libs/${lib}/index.ts`) return undefined;
  // A lib's test kit (engine.test-util.ts) is no part of its public face; tests may share it.
  if (isTestOnly(e.to) && isTestOnly(e.from)) return undefined;
  return `libs/${lib} is imported through libs/${lib}/index.ts, not ${e.to}`;
}

/** Strongly connected components of the module graph with more than one file (Tarjan). */
export function findCircles(edges: readonly Edge[]): string[][] {
  const next = new Map<string, Set<string>>();
  for (const e of edges) {
    // A started worker or child process is another realm: it does not load its parent's module.
    if (e.kind === 'spawn') continue;
    let set = next.get(e.from);
    if (!set) next.set(e.from, (set = new Set()));
    set.add(e.to);
  }
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const onStack = new Set<string>();
  const stack: string[] = [];
  const circles: string[][] = [];
  let counter = 0;
  const strong = (v: string): void => {
    index.set(v, counter);
    low.set(v, counter);
    counter++;
    stack.push(v);
    onStack.add(v);
    for (const w of next.get(v) ?? []) {
      if (!index.has(w)) {
        strong(w);
        low.set(v, Math.min(low.get(v) as number, low.get(w) as number));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v) as number, index.get(w) as number));
      }
    }
    if (low.get(v) === index.get(v)) {
      const component: string[] = [];
      let w: string;
      do {
        w = stack.pop() as string;
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      if (component.length > 1) circles.push(component.sort());
    }
  };
  for (const v of [...next.keys()].sort()) if (!index.has(v)) strong(v);
  return circles.sort((a, b) => (a[0] as string).localeCompare(b[0] as string));
}

export function circleKey(files: readonly string[]): string {
  return [...files].sort().join(' ⇄ ');
}

/** Reads of `STREAMINFER_TEST_*` in product code outside the test-hooks module. */
function testEnvReads(file: string, text: string): Violation[] {
  if (zoneOf(file) !== 'apps' && zoneOf(file) !== 'libs') return [];
  if (isTestOnly(file) || file === TEST_HOOKS_MODULE || !text.includes('STREAMINFER_TEST_')) return [];
  const out: Violation[] = [];
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.ES2022, false, ts.ScriptKind.TS);
  const visit = (node: ts.Node): void => {
    // Any string or property name that spells a test variable: comments do not count, code does.
    const name =
      ts.isStringLiteralLike(node) || ts.isIdentifier(node) || ts.isPrivateIdentifier(node)
        ? node.text
        : undefined;
    if (name?.startsWith('STREAMINFER_TEST_')) {
      const line = source.getLineAndCharacterOfPosition(node.getStart(source)).line + 1;
      out.push({ rule: 'test-env', file, line, detail: `${name} is read outside ${TEST_HOOKS_MODULE}` });
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return out;
}

/** Every violation of the layering rules in `files` (repo-relative path → TypeScript source). */
export function checkLayers(
  files: ReadonlyMap<string, string>,
  allowed: Allowed = NOTHING_ALLOWED,
): Violation[] {
  const exists = (f: string): boolean => files.has(f);
  const violations: Violation[] = [];
  const edges: Edge[] = [];
  for (const [file, text] of files) {
    const scan = scanImports(file, text, exists);
    edges.push(...scan.edges);
    violations.push(...scan.unresolved, ...testEnvReads(file, text));
  }
  for (const e of edges) {
    const key = edgeKey(e.from, e.to);
    if (allowed.edges.has(key)) continue;
    const layer = layerRule(e);
    if (layer)
      violations.push({
        rule: layer.rule,
        file: e.from,
        line: e.line,
        detail: `→ ${e.to}: ${layer.why}`,
        key,
      });
    const index = indexRule(e);
    if (index)
      violations.push({ rule: 'lib-index', file: e.from, line: e.line, detail: `→ ${e.to}: ${index}`, key });
  }
  for (const circle of findCircles(edges)) {
    const key = circleKey(circle);
    if (allowed.circles.has(key)) continue;
    violations.push({ rule: 'circle', file: circle[0] as string, line: 0, detail: `circle: ${key}`, key });
  }
  return violations;
}

/**
 * The shipped build (tsconfig.build.json, run by `npm ci` through `prepare`): `compiled` is every source file
 * of ours its program holds, imports followed; it must be exactly the product, apps/ and libs/ less their
 * test-only files.
 */
export function shipViolations(compiled: readonly string[], all: readonly string[]): Violation[] {
  const out: Violation[] = [];
  const shipped = new Set(compiled);
  for (const file of compiled) {
    const zone = zoneOf(file);
    if (isTestOnly(file) || (zone !== 'apps' && zone !== 'libs'))
      out.push({ rule: 'shipped', file, line: 0, detail: 'is compiled into the shipped build' });
  }
  for (const file of all) {
    const zone = zoneOf(file);
    if ((zone === 'apps' || zone === 'libs') && !isTestOnly(file) && !shipped.has(file))
      out.push({ rule: 'shipped', file, line: 0, detail: 'is product code left out of the shipped build' });
  }
  return out;
}

export function formatViolation(v: Violation): string {
  return `[${v.rule}] ${v.file}${v.line ? `:${v.line}` : ''} ${v.detail}`;
}
