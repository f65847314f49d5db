/**
 * The one-way layering of the repository (rules in test/repo/layers.ts), checked on every source file, and
 * the shipped build (tsconfig.build.json) holding the product and nothing else. Each rule is first proved
 * able to fail on a synthetic violation.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import * as path from 'node:path';
import * as ts from 'typescript';
import {
  type Allowed,
  APP_ORDER,
  checkLayers,
  circleKey,
  edgeKey,
  formatViolation,
  type Rule,
  shipViolations,
  type Violation,
} from './layers';

const REPO_ROOT = path.resolve(__dirname, '../../..');
const SOURCE_DIRS = ['apps', 'libs', 'scripts', 'loadtest', 'test', 'deploy'];

function readSources(): Map<string, string> {
  const files = new Map<string, string>();
  const walk = (dir: string): void => {
    for (const name of readdirSync(path.join(REPO_ROOT, dir))) {
      const rel = `${dir}/${name}`;
      if (statSync(path.join(REPO_ROOT, rel)).isDirectory()) walk(rel);
      else if (name.endsWith('.ts')) files.set(rel, readFileSync(path.join(REPO_ROOT, rel), 'utf8'));
    }
  };
  for (const dir of SOURCE_DIRS) walk(dir);
  return files;
}

/** A small repository that keeps every rule: each case below breaks exactly one. */
const CLEAN: Record<string, string> = {
  'libs/a/index.ts': "export { a } from './a';",
  'libs/a/a.ts': "import { b } from '../b';\nexport const a = b;",
  'libs/a/a.test.ts':
    "import { a } from './a';\nimport { b } from '../b';\nimport { kit } from './a.test-util';",
  'libs/a/a.test-util.ts': 'export const kit = 1;',
  'libs/b/index.ts': 'export const b = 1;',
  'libs/b/b.test.ts': "import { kit } from '../a/a.test-util';",
  'libs/test-hooks/index.ts': "export const on = process.env.STREAMINFER_TEST_HOOKS === '1';",
  'apps/worker/w.ts': "import { a } from '../../libs/a';\nexport type W = number;",
  'apps/node/n.ts':
    "import '../worker/w';\nimport * as path from 'node:path';\nnew Worker(path.join(__dirname, '../worker/w.js'));",
  'apps/pipeline/p.ts': "import '../node/n';",
  'apps/supervisor/s.ts':
    "import { join } from 'node:path';\nimport '../node/n';\nfork(join(__dirname, '../node/n.js'));",
  'apps/cli/c.ts': "import '../supervisor/s';\nimport '../pipeline/p';\nimport '../../libs/test-hooks';",
  'deploy/d.ts': "import '../libs/b';",
  'scripts/s.ts': "import '../libs/a';\nimport '../deploy/d';",
  'loadtest/l.ts': "import '../apps/cli/c';\nimport '../scripts/s';\nimport '../libs/a';",
  'test/kit.ts': 'export const k = 1;',
  'test/t.test.ts':
    "import '../apps/cli/c';\nimport '../loadtest/l';\nimport './kit';\nimport '../libs/a/a.test-util';",
};

const CASES: { name: string; files: Record<string, string>; rules: Rule[] }[] = [
  {
    name: 'a lib imports an app',
    files: { 'libs/c/index.ts': "import '../../apps/worker/w';" },
    rules: ['libs-down'],
  },
  {
    name: 'a lib imports a script',
    files: { 'libs/c/index.ts': "import '../../scripts/s';" },
    rules: ['libs-down'],
  },
  {
    name: 'a lib imports loadtest',
    files: { 'libs/c/index.ts': "import '../../loadtest/l';" },
    rules: ['libs-down'],
  },
  {
    name: 'a lib test imports a test/ kit',
    files: { 'libs/a/x.test.ts': "import '../../test/kit';" },
    rules: ['test-only'],
  },
  {
    name: 'an app imports a script',
    files: { 'apps/node/x.ts': "import '../../scripts/s';" },
    rules: ['apps-down'],
  },
  {
    name: 'an app imports loadtest',
    files: { 'apps/cli/x.ts': "import '../../loadtest/l';" },
    rules: ['apps-down'],
  },
  {
    name: 'an app imports an app above it',
    files: { 'apps/node/x.ts': "import '../pipeline/p';" },
    rules: ['app-order'],
  },
  {
    name: 'an app imports the app beside it',
    files: { 'apps/pipeline/x.ts': "import '../supervisor/s';" },
    rules: ['app-order'],
  },
  {
    name: 'an app starts a process of an app above it',
    files: {
      'apps/worker/x.ts': "import * as path from 'node:path';\nfork(path.join(__dirname, '../cli/c.js'));",
    },
    rules: ['app-order'],
  },
  {
    name: 'a script imports an app',
    files: { 'scripts/x.ts': "import '../apps/cli/c';" },
    rules: ['scripts-down'],
  },
  {
    name: 'a script imports loadtest',
    files: { 'scripts/x.ts': "import '../loadtest/l';" },
    rules: ['scripts-down'],
  },
  {
    name: 'loadtest imports test/',
    files: { 'loadtest/x.ts': "import '../test/kit';" },
    rules: ['test-only'],
  },
  {
    name: 'an app imports test/',
    files: { 'apps/node/x.ts': "import '../../test/kit';" },
    rules: ['test-only'],
  },
  {
    name: 'product imports a test kit',
    files: { 'libs/a/x.ts': "import './a.test-util';" },
    rules: ['test-only'],
  },
  {
    name: 'product starts a test worker',
    files: {
      'libs/a/ring-test-worker.ts': '',
      'libs/a/x.ts': "import { join } from 'node:path';\nnew Worker(join(__dirname, 'ring-test-worker.js'));",
    },
    rules: ['test-only'],
  },
  {
    name: 'an app reaches inside a lib',
    files: { 'apps/node/x.ts': "import '../../libs/a/a';" },
    rules: ['lib-index'],
  },
  {
    name: 'a lib reaches inside another',
    files: { 'libs/b/x.ts': "import '../a/a';" },
    rules: ['lib-index'],
  },
  {
    name: 'a test reaches inside a lib',
    files: { 'test/x.test.ts': "import '../libs/a/a';" },
    rules: ['lib-index'],
  },
  {
    name: 'a circle of two files (one side type-only)',
    files: { 'libs/b/one.ts': "import './two';", 'libs/b/two.ts': "import type { X } from './one';" },
    rules: ['circle'],
  },
  {
    name: 'a circle of three files',
    files: {
      'apps/node/x.ts': "import './y';",
      'apps/node/y.ts': "export * from './z';",
      'apps/node/z.ts': "import './x';",
    },
    rules: ['circle'],
  },
  {
    name: 'product reads a test variable',
    files: { 'apps/node/x.ts': 'export const ms = Number(process.env.STREAMINFER_TEST_HOLD_MS ?? 0);' },
    rules: ['test-env'],
  },
  {
    name: 'product reads a test variable by its string',
    files: { 'libs/b/x.ts': "export const on = process.env['STREAMINFER_TEST_HOOKS'];" },
    rules: ['test-env'],
  },
  {
    name: 'an import that resolves to nothing',
    files: { 'libs/b/x.ts': "import './missing';" },
    rules: ['unresolved'],
  },
  // Every form of import is seen.
  {
    name: 'export … from',
    files: { 'libs/c/index.ts': "export * from '../../apps/worker/w';" },
    rules: ['libs-down'],
  },
  {
    name: 'import type',
    files: { 'libs/c/index.ts': "import type { W } from '../../apps/worker/w';" },
    rules: ['libs-down'],
  },
  {
    name: 'an import() type',
    files: { 'libs/c/index.ts': "export type T = import('../../apps/worker/w').W;" },
    rules: ['libs-down'],
  },
  {
    name: 'dynamic import()',
    files: { 'libs/c/index.ts': "export const m = import('../../apps/worker/w');" },
    rules: ['libs-down'],
  },
  {
    name: 'require()',
    files: { 'libs/c/index.ts': "export const m = require('../../apps/worker/w');" },
    rules: ['libs-down'],
  },
  {
    name: 'import = require()',
    files: { 'libs/c/index.ts': "import w = require('../../apps/worker/w');\nexport const m = w;" },
    rules: ['libs-down'],
  },
  {
    name: 'a child process from __dirname',
    files: {
      'libs/c/index.ts':
        "import * as path from 'node:path';\nfork(path.resolve(__dirname, '../../apps/worker/w.js'));",
    },
    rules: ['libs-down'],
  },
];

function rulesOf(files: Record<string, string>, allowed?: Allowed): Rule[] {
  const violations = checkLayers(new Map(Object.entries(files)), allowed);
  return [...new Set(violations.map((v) => v.rule))].sort();
}

describe('the layering checker', () => {
  it('finds nothing in a repository that keeps the rules', () => {
    expect(checkLayers(new Map(Object.entries(CLEAN))).map(formatViolation)).toEqual([]);
  });

  it.each(CASES)('catches $name', ({ files, rules }) => {
    expect(rulesOf({ ...CLEAN, ...files })).toEqual([...rules].sort());
  });

  it('lets an allow-list name one edge or one circle and nothing more', () => {
    const files = {
      ...CLEAN,
      'apps/pipeline/x.ts': "import '../supervisor/s';",
      'apps/pipeline/y.ts': "import '../supervisor/s';",
      'libs/b/one.ts': "import './two';",
      'libs/b/two.ts': "import './one';",
    };
    const allowed: Allowed = {
      edges: new Set([edgeKey('apps/pipeline/x.ts', 'apps/supervisor/s.ts')]),
      circles: new Set([circleKey(['libs/b/two.ts', 'libs/b/one.ts'])]),
    };
    const left = checkLayers(new Map(Object.entries(files)), allowed);
    expect(left.map((v) => [v.rule, v.file])).toEqual([['app-order', 'apps/pipeline/y.ts']]);
  });

  it('holds the shipped build to the product', () => {
    const all = ['apps/cli/c.ts', 'apps/node/n.ts', 'libs/a/a.ts', 'libs/a/a.test.ts', 'test/kit.ts'];
    expect(shipViolations(['apps/cli/c.ts', 'apps/node/n.ts', 'libs/a/a.ts'], all)).toEqual([]);
    const bad = shipViolations(['apps/cli/c.ts', 'libs/a/a.ts', 'libs/a/a.test.ts', 'test/kit.ts'], all);
    expect(bad.map((v) => `${v.file} ${v.detail}`)).toEqual([
      'libs/a/a.test.ts is compiled into the shipped build',
      'test/kit.ts is compiled into the shipped build',
      'apps/node/n.ts is product code left out of the shipped build',
    ]);
  });
});

describe('the repository', () => {
  const files = readSources();

  // One pass over every file; nothing is allowed.
  let found: Violation[] = [];
  beforeAll(() => {
    found = checkLayers(files);
  });
  it(`imports one way (${APP_ORDER}), without circles, test variables only in libs/test-hooks`, () => {
    expect(found.map(formatViolation)).toEqual([]);
  });

  it('ships the product and no test-only file (tsconfig.build.json, run by npm ci)', () => {
    const pkg = JSON.parse(readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8')) as {
      bin: Record<string, string>;
      scripts: Record<string, string>;
    };
    expect(pkg.scripts.prepare).toBe('npm run build:ship');
    expect(pkg.scripts['build:ship']).toBe('tsc -p tsconfig.build.json');
    const parsed = ts.getParsedCommandLineOfConfigFile(
      path.join(REPO_ROOT, 'tsconfig.build.json'),
      undefined,
      {
        ...ts.sys,
        onUnRecoverableConfigFileDiagnostic: (d) => {
          throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\n'));
        },
      },
    );
    if (!parsed) throw new Error('tsconfig.build.json did not parse');
    expect(parsed.errors).toEqual([]);
    // Same layout as the full build, so the bin, the systemd unit and the image start the same file.
    expect(parsed.options.outDir).toBe(path.join(REPO_ROOT, 'dist'));
    expect(parsed.options.types).toEqual(['node']);
    const program = ts.createProgram({
      rootNames: parsed.fileNames,
      options: { ...parsed.options, noEmit: true },
    });
    const compiled = program
      .getSourceFiles()
      .map((f) => path.relative(REPO_ROOT, f.fileName))
      .filter((f) => !f.startsWith('node_modules/') && !f.startsWith('..'));
    expect(shipViolations(compiled, [...files.keys()]).map(formatViolation)).toEqual([]);
    for (const bin of Object.values(pkg.bin))
      expect(compiled).toContain(bin.replace(/^dist\//, '').replace(/\.js$/, '.ts'));
  });
});
