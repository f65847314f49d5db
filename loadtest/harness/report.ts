/**
 * Bench report rendering: Markdown tables and the full report.md, plus writing
 * `reports/latest/` and a timestamped copy `reports/<ISO timestamp>/` (report.json,
 * report.md and the SVG charts).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { escapeCell, fmt, markdownTable } from '../../scripts/markdown';
import { formatNumber } from './svg-chart';
import type { BenchReport, RunRecord, ScenarioReport } from './types';

export function fmtRatio(v: number | undefined): string {
  return v === undefined || !Number.isFinite(v) ? '–' : `${v.toFixed(3)}×`;
}

function errorsText(r: RunRecord): string {
  const l = r.load;
  if (!l) return '';
  const parts = Object.entries(l.errors)
    .sort((a, b) => b[1] - a[1])
    .map(([code, n]) => `${code}: ${n}`);
  return parts.length ? parts.join(', ') : '0';
}

/** One row per run: the core figures every scenario shares. */
export function runsTable(runs: readonly RunRecord[]): string {
  const headers = [
    'run',
    'conns',
    'ok',
    'errors',
    'req/s',
    'p50 ms',
    'p95 ms',
    'p99 ms',
    'max ms',
    'server CPU',
    'loadgen CPU',
  ];
  const rows = runs.map((r) => {
    const l = r.load;
    if (!l) return [r.label, '–', '–', r.error ? 'FAILED' : '–', '–', '–', '–', '–', '–', '–', '–'];
    return [
      r.label,
      l.connectionsOpened === l.connections
        ? String(l.connections)
        : `${l.connectionsOpened}/${l.connections}`,
      fmt(l.ok),
      errorsText(r),
      fmt(l.throughputRps),
      fmt(l.latencyMs.p50),
      fmt(l.latencyMs.p95),
      fmt(l.latencyMs.p99),
      fmt(l.latencyMs.max),
      r.serverCpuPct === undefined ? '–' : `${Math.round(r.serverCpuPct)}%`,
      l.loadgenCpuPct.map((c) => `${c}%`).join('+'),
    ];
  });
  return markdownTable(headers, rows, [
    'left',
    'right',
    'right',
    'left',
    'right',
    'right',
    'right',
    'right',
    'right',
    'right',
    'right',
  ]);
}

function runDetails(r: RunRecord): string[] {
  const out: string[] = [];
  if (r.error) out.push(`- **${escapeCell(r.label)}** failed: see below`);
  const l = r.load;
  if (l) {
    const bits: string[] = [];
    if (l.stoppedBy !== 'completed') bits.push(`stopped by ${l.stoppedBy}`);
    if (l.connectFailures.length) {
      const sample = l.connectFailures
        .slice(0, 3)
        .map((c) => c.message)
        .join('; ');
      bits.push(`${l.connectFailures.length} connections failed to open (${sample})`);
    }
    if (l.closes.length) {
      const codes: Record<string, number> = {};
      for (const c of l.closes) codes[c.code] = (codes[c.code] ?? 0) + 1;
      bits.push(
        `${l.closes.length} connections closed early (codes ${Object.entries(codes)
          .map(([k, v]) => `${k}×${v}`)
          .join(', ')})`,
      );
    }
    if (l.warningCount) {
      bits.push(
        `warnings: ${Object.entries(l.warnings)
          .map(([k, v]) => `${k}: ${v}`)
          .join(', ')}`,
      );
    }
    if (l.unmatched) bits.push(`${l.unmatched} unmatched answers`);
    if (l.notSent) bits.push(`${l.notSent} requests never sent`);
    if (l.warmupErrors) bits.push(`${l.warmupErrors} errors during warm-up`);
    const versions = Object.entries(l.versions);
    if (versions.length > 1 || (versions.length === 1 && versions[0]![0] !== '1')) {
      bits.push(`versions: ${versions.map(([v, n]) => `${v}: ${n}`).join(', ')}`);
    }
    for (const [k, v] of Object.entries(r.metrics ?? {})) {
      if (v !== undefined) bits.push(`${k} = ${fmt(v)}`);
    }
    if (r.server?.exit && (r.server.exit.killed || (r.server.exit.code ?? 0) !== 0)) {
      const e = r.server.exit;
      bits.push(
        `server exit: code ${e.code}, signal ${e.signal}${e.killed ? ' (SIGKILLed after grace)' : ''}`,
      );
    }
    if (bits.length) out.push(`- **${escapeCell(r.label)}**: ${bits.join('; ')}`);
  }
  return out;
}

function codeBlock(s: string): string {
  return '```\n' + s.replace(/```/g, "'''") + '\n```';
}

export function renderScenario(s: ScenarioReport): string {
  const out: string[] = [`## ${s.name} ${s.ok ? '' : '— FAILED'}`.trim(), '', s.description, ''];
  const params = Object.entries(s.params);
  if (params.length) {
    out.push(
      params
        .map(([k, v]) => `\`${k}\`=${escapeCell(typeof v === 'string' ? v : JSON.stringify(v))}`)
        .join(' · '),
    );
    out.push('');
  }
  if (s.runs.length) out.push(runsTable(s.runs), '');
  if (s.ratios.length) {
    out.push(
      markdownTable(
        ['ratio', 'value', 'note'],
        s.ratios.map((r) => [r.name, fmtRatio(r.value), r.note ?? '']),
        ['left', 'right', 'left'],
      ),
      '',
    );
  }
  for (const c of s.charts) out.push(`![${escapeCell(c.title)}](${c.file})`);
  if (s.charts.length) out.push('');
  const details = s.runs.flatMap(runDetails);
  if (details.length) out.push(...details, '');
  if (s.notes.length) out.push(...s.notes.map((n) => `> ${n.replace(/\n/g, '\n> ')}`), '');
  if (s.markdown) out.push(s.markdown.trim(), '');
  for (const r of s.runs) {
    if (r.error) out.push(`**${r.label}** error:`, '', codeBlock(r.error), '');
  }
  if (s.error) out.push('Scenario error:', '', codeBlock(s.error), '');
  out.push(`_${s.name}: started ${s.startedAt}, took ${(s.durationMs / 1000).toFixed(1)} s_`, '');
  return out.join('\n');
}

export function renderReport(r: BenchReport): string {
  const m = r.machine;
  const la = (x: number[]): string => x.map((v) => v.toFixed(2)).join(' / ');
  const out: string[] = [
    `# StreamInfer bench — ${r.startedAt}`,
    '',
    r.ok ? 'All scenarios completed.' : '**Some scenarios or runs failed** — see below.',
    '',
    markdownTable(
      ['machine', ''],
      [
        ['CPU', `${m.cpuModel} × ${m.cores}`],
        ['memory', `${m.totalMemGiB} GiB`],
        ['OS', `${m.platform} ${m.kernel} (${m.arch})`],
        ['node', m.node],
        ['uWS native', m.uwsNative ? 'yes' : 'NO (pure-JS fallback)'],
        ['load average (1/5/15) before', la(m.loadAvgBefore)],
        ['load average (1/5/15) after', la(m.loadAvgAfter)],
        ['git', m.gitCommit ? `${m.gitCommit.slice(0, 12)}${m.gitDirty ? ' (dirty)' : ''}` : '–'],
        [
          'options',
          `scenarios=${r.options.scenarios.join(',')} quick=${r.options.quick} rounds=${r.options.rounds} loadgen processes=${r.options.loadgenProcesses}`,
        ],
      ],
      ['left', 'left'],
    ),
    '',
    '> Load generator, servers and anything else on this host share the same cores; absolute',
    "> figures move with the machine's load. Compare the ratios within one report, not",
    '> absolute numbers across reports. Latency is client-side send → receive.',
    '',
  ];
  if (r.scenarios.length > 1 || r.scenarios.some((s) => s.ratios.length)) {
    out.push(
      '## Summary',
      '',
      markdownTable(
        ['scenario', 'status', 'key figures'],
        r.scenarios.map((s) => [
          s.name,
          s.ok ? 'ok' : 'FAILED',
          s.ratios.map((x) => `${x.name} ${fmtRatio(x.value)}`).join('; ') ||
            s.runs
              .map((x) => `${x.label}: ${x.load ? formatNumber(x.load.throughputRps) + ' req/s' : 'failed'}`)
              .join('; '),
        ]),
        ['left', 'left', 'left'],
      ),
      '',
    );
  }
  for (const s of r.scenarios) out.push(renderScenario(s));
  return out.join('\n');
}

/** Folder-name-safe ISO timestamp: 2025-01-31T12-34-56.789Z */
export function timestampDir(iso: string): string {
  return iso.replace(/:/g, '-');
}

/** report.json without the SVG bodies (they are written as files next to it). */
export function reportJson(r: BenchReport): string {
  const slim = {
    ...r,
    scenarios: r.scenarios.map((s) => ({
      ...s,
      charts: s.charts.map((c) => ({ file: c.file, title: c.title })),
    })),
  };
  return JSON.stringify(
    slim,
    (_k, v: unknown) => (typeof v === 'number' && !Number.isFinite(v) ? String(v) : v),
    2,
  );
}

function writeInto(dir: string, r: BenchReport, md: string, json: string): void {
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'report.json'), json + '\n');
  fs.writeFileSync(path.join(dir, 'report.md'), md);
  for (const s of r.scenarios) for (const c of s.charts) fs.writeFileSync(path.join(dir, c.file), c.svg);
}

/** Write `<root>/latest/` (replaced) and `<root>/<timestamp>/`; returns both folders. */
export function writeReport(r: BenchReport, root: string): { latest: string; stamped: string } {
  const md = renderReport(r);
  const json = reportJson(r);
  const stamped = path.join(root, timestampDir(r.startedAt));
  const latest = path.join(root, 'latest');
  writeInto(stamped, r, md, json);
  fs.rmSync(latest, { recursive: true, force: true });
  writeInto(latest, r, md, json);
  return { latest, stamped };
}
