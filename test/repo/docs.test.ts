/**
 * The docs hold together: every relative link lands on a file (and its #anchor on a heading), the README stays
 * a short front page that opens with the two commands, no text cites a ticket number or a file that does not
 * exist, and the reference pages name every setting and every metric the code defines.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import * as path from 'node:path';
import { describeSettings } from '../../libs/config';

const REPO_ROOT = path.resolve(__dirname, '../../..');
const README_MAX_LINES = 160;
const TWO_COMMANDS = ['npm ci && npx streaminfer serve', 'npm ci && npm test'];
/** Where citations may not appear: product code, tests, tools, deployment files and docs. */
const CITATION_DIRS = ['apps', 'libs', 'scripts', 'loadtest', 'test', 'deploy', 'docs', 'models', 'data'];
const CITATION_FILES = ['README.md', 'CONTRIBUTING.md', 'CHANGELOG.md'];
const TEXT_FILE = /\.(ts|js|md|json|ya?ml|sh|conf|service|txt)$/;
/** A ticket number (the word, a space, a number), and the design notes the code once cited but never held. */
const CITATIONS = [/\bissues?\s+#?\d/i, /fleet[-]design/i, /\bDESIGN\.md\b/];
/** Metric-like literals that are resource names, not metrics. */
const NOT_METRICS = new Set(['streaminfer_leases', 'streaminfer_checkpoints']);

function walk(dir: string, keep: (name: string) => boolean, out: string[] = []): string[] {
  if (!existsSync(dir)) return out;
  for (const name of readdirSync(dir)) {
    if (name === 'node_modules' || name === 'dist' || name.startsWith('.')) continue;
    const file = path.join(dir, name);
    if (statSync(file).isDirectory()) walk(file, keep, out);
    else if (keep(name)) out.push(file);
  }
  return out;
}

function docFiles(): string[] {
  const top = CITATION_FILES.map((f) => path.join(REPO_ROOT, f)).filter((f) => existsSync(f));
  return [...top, ...walk(path.join(REPO_ROOT, 'docs'), (n) => n.endsWith('.md'))];
}

/** The text outside fenced code blocks and inline code, where Markdown links are links. */
function prose(markdown: string): string[] {
  const lines: string[] = [];
  let fenced = false;
  for (const line of markdown.split('\n')) {
    if (/^\s*(```|~~~)/.test(line)) {
      fenced = !fenced;
      lines.push('');
      continue;
    }
    lines.push(fenced ? '' : line.replace(/`[^`]*`/g, ''));
  }
  return lines;
}

/** GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, repeats numbered. */
function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  let fenced = false;
  for (const line of markdown.split('\n')) {
    if (/^\s*(```|~~~)/.test(line)) fenced = !fenced;
    const m = fenced ? null : /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!m) continue;
    const base = m[1]!
      .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/\s/g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

function links(markdown: string): { line: number; target: string }[] {
  const out: { line: number; target: string }[] = [];
  prose(markdown).forEach((text, i) => {
    for (const m of text.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g))
      out.push({ line: i + 1, target: m[1]! });
  });
  return out;
}

describe('the docs', () => {
  it('exist: README, CONTRIBUTING, CHANGELOG and the docs tree', () => {
    const missing = [
      ...CITATION_FILES,
      'docs/glossary.md',
      'docs/development.md',
      'docs/reference/configuration.md',
      'docs/reference/metrics.md',
      'docs/reference/protocols.md',
    ].filter((f) => !existsSync(path.join(REPO_ROOT, f)));
    expect(missing).toEqual([]);
  });

  it('link only to files and headings that exist', () => {
    const broken: string[] = [];
    const cache = new Map<string, Set<string>>();
    const headingsOf = (file: string): Set<string> => {
      let set = cache.get(file);
      if (!set) {
        set = anchors(readFileSync(file, 'utf8'));
        cache.set(file, set);
      }
      return set;
    };
    for (const file of docFiles()) {
      const text = readFileSync(file, 'utf8');
      for (const { line, target } of links(text)) {
        if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto:, file:
        const [rawPath, anchor] = target.split('#', 2) as [string, string | undefined];
        const where = `${path.relative(REPO_ROOT, file)}:${line} → ${target}`;
        const resolved = rawPath === '' ? file : path.resolve(path.dirname(file), decodeURI(rawPath));
        if (!resolved.startsWith(REPO_ROOT) || !existsSync(resolved)) {
          broken.push(`${where} (no such file)`);
          continue;
        }
        if (anchor === undefined || anchor === '') continue;
        if (!resolved.endsWith('.md') || !headingsOf(resolved).has(decodeURIComponent(anchor)))
          broken.push(`${where} (no such heading)`);
      }
    }
    expect(broken).toEqual([]);
  });

  it('keep the README a front page that opens with the two commands', () => {
    const readme = readFileSync(path.join(REPO_ROOT, 'README.md'), 'utf8');
    const lines = readme.trimEnd().split('\n');
    expect(lines.length).toBeLessThanOrEqual(README_MAX_LINES);
    // The title, one sentence or two, then the commands: the first code block and the first thing to run.
    const fence = lines.findIndex((l) => l.startsWith('```'));
    expect(fence).toBeGreaterThan(0);
    expect(fence).toBeLessThan(8);
    expect(lines[fence + 1]).toContain(TWO_COMMANDS[0]);
    expect(lines[fence + 2]).toContain(TWO_COMMANDS[1]);
    expect(lines[fence + 3]).toBe('```');
  });

  it('cite no ticket numbers and no missing design notes', () => {
    const offenders: string[] = [];
    const files = [
      ...CITATION_FILES.map((f) => path.join(REPO_ROOT, f)).filter((f) => existsSync(f)),
      ...CITATION_DIRS.flatMap((d) => walk(path.join(REPO_ROOT, d), (n) => TEXT_FILE.test(n))),
    ];
    for (const file of files) {
      readFileSync(file, 'utf8')
        .split('\n')
        .forEach((line, i) => {
          if (CITATIONS.some((re) => re.test(line)))
            offenders.push(`${path.relative(REPO_ROOT, file)}:${i + 1}`);
        });
    }
    expect(offenders).toEqual([]);
  });

  it('cite only source paths that exist', () => {
    // A path named in prose or a comment (apps/…, libs/…, loadtest/…) must still be there after a move;
    // loadtest/reports is the bench's output, made when it runs; the changelog names old paths on purpose.
    const cited = /(?<![\w./-])((?:apps|libs|loadtest|scripts|deploy|test)\/[\w./-]*[\w-])/g;
    const exists = (p: string): boolean =>
      [p, `${p}.ts`, `${p}.js`].some((c) => existsSync(path.join(REPO_ROOT, c))) ||
      // dist/… paths name the compiled file of a source one.
      existsSync(path.join(REPO_ROOT, p.replace(/\.js$/, '.ts')));
    const stale: string[] = [];
    const files = [
      ...docFiles().filter((f) => path.basename(f) !== 'CHANGELOG.md'),
      ...['apps', 'libs', 'loadtest', 'scripts'].flatMap((d) =>
        walk(path.join(REPO_ROOT, d), (n) => n.endsWith('.ts') || n.endsWith('.md')),
      ),
    ];
    for (const file of files)
      readFileSync(file, 'utf8')
        .split('\n')
        .forEach((line, i) => {
          for (const m of line.matchAll(cited)) {
            const p = m[1]!.replace(/^(.*?)\/?\*.*$/, '$1').replace(/[.]+$/, '');
            if (p.includes('*') || p.includes('<') || p.startsWith('loadtest/reports') || exists(p)) continue;
            stale.push(`${path.relative(REPO_ROOT, file)}:${i + 1} → ${p}`);
          }
        });
    expect(stale).toEqual([]);
  });

  it('start only compiled files that have a source', () => {
    // A compiled path joined from segments ("dist", "loadtest", …): a moved source breaks it only when run.
    const joined = /'dist'((?:,\s*'[\w.-]+')+)/g;
    const stale: string[] = [];
    for (const d of ['apps', 'libs', 'loadtest', 'scripts', 'test'])
      for (const file of walk(path.join(REPO_ROOT, d), (n) => n.endsWith('.ts')))
        for (const m of readFileSync(file, 'utf8').matchAll(joined)) {
          const rel = [...m[1]!.matchAll(/'([\w.-]+)'/g)].map((x) => x[1]!).join('/');
          if (!rel.endsWith('.js')) continue;
          if (!existsSync(path.join(REPO_ROOT, rel.replace(/\.js$/, '.ts'))))
            stale.push(`${path.relative(REPO_ROOT, file)} → dist/${rel}`);
        }
    expect(stale).toEqual([]);
  });

  it('list every server setting with its key, environment variable and default', () => {
    const text = readFileSync(path.join(REPO_ROOT, 'docs/reference/configuration.md'), 'utf8');
    const rows = text.split('\n').filter((l) => l.startsWith('|'));
    const missing = describeSettings()
      .filter((s) => {
        const row = rows.find((r) => r.includes(`\`${s.key}\``));
        return !(row?.includes(`\`${s.env}\``) && row.includes(s.defaultText));
      })
      .map((s) => s.key);
    expect(missing).toEqual([]);
  });

  it('list every key of the shipped pipeline.json', () => {
    const text = readFileSync(path.join(REPO_ROOT, 'docs/reference/configuration.md'), 'utf8');
    const pipeline = JSON.parse(readFileSync(path.join(REPO_ROOT, 'deploy/pipeline.json'), 'utf8')) as object;
    const keys: string[] = [];
    const flatten = (value: unknown, prefix: string): void => {
      if (value !== null && typeof value === 'object' && !Array.isArray(value))
        for (const [k, v] of Object.entries(value)) flatten(v, prefix ? `${prefix}.${k}` : k);
      else keys.push(prefix);
    };
    flatten(pipeline, '');
    expect(keys.filter((k) => !text.includes(`\`${k}\``))).toEqual([]);
  });

  it('list every metric the product code defines', () => {
    const text = readFileSync(path.join(REPO_ROOT, 'docs/reference/metrics.md'), 'utf8');
    const names = new Set<string>();
    for (const dir of ['apps', 'libs'])
      for (const file of walk(path.join(REPO_ROOT, dir), (n) => n.endsWith('.ts') && !n.endsWith('.test.ts')))
        for (const m of readFileSync(file, 'utf8').matchAll(/['`](streaminfer_[a-z0-9_]*[a-z0-9])['`]/g)) {
          const name = m[1]!.replace(/_(bucket|sum|count)$/, '');
          if (!NOT_METRICS.has(name)) names.add(name);
        }
    expect(names.size).toBeGreaterThan(50);
    expect([...names].filter((n) => !text.includes(n)).sort()).toEqual([]);
  });
});
