import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { renderReport, reportJson, runsTable, writeReport } from '../../loadtest/harness/report';
import { LoadStats, mergePartials } from '../../loadtest/harness/stats';
import type { BenchReport, RunRecord } from '../../loadtest/harness/types';
import { escapeCell, fmt, markdownTable } from '../../scripts/markdown';

function load(ok: number, tput: number): RunRecord['load'] {
  const s = new LoadStats();
  s.startEpochMs = 0;
  for (let i = 0; i < ok; i++) s.recordOk(2000, '1', 1);
  s.recordError('overloaded', 2);
  s.sent = ok + 1;
  const part = s.toPartial({
    connections: 4,
    connectionsOpened: 3,
    connectFailures: [{ conn: 3, message: 'refused' }],
    closes: [{ conn: 1, code: 1013, reason: 'slow', atMs: 5, pending: 0 }],
    startEpochMs: 0,
    endEpochMs: (ok / tput) * 1000,
    stoppedBy: 'completed',
    cpuPct: 91,
  });
  return mergePartials([part], {
    url: 'ws://x/ws',
    body: 'echo-floats',
    requestsPerConnection: 10,
    inFlightPerConnection: Number.POSITIVE_INFINITY,
    ratePerConnection: null,
    warmupPerConnection: 0,
  });
}

function sampleReport(): BenchReport {
  return {
    tool: 'streaminfer-bench',
    schema: 1,
    startedAt: '2025-01-02T03:04:05.678Z',
    finishedAt: '2025-01-02T03:05:05.678Z',
    durationMs: 60000,
    options: { scenarios: ['ws-echo'], quick: true, rounds: 1, loadgenProcesses: 1 },
    machine: {
      cpuModel: 'Test CPU',
      cores: 2,
      totalMemGiB: 4,
      platform: 'linux',
      arch: 'x64',
      kernel: '6.0',
      node: 'v20.0.0',
      uwsNative: true,
      loadAvgBefore: [1, 2, 3],
      loadAvgAfter: [1.5, 2, 3],
    },
    ok: false,
    scenarios: [
      {
        name: 'ws-echo',
        description: 'desc',
        ok: false,
        startedAt: '2025-01-02T03:04:05.678Z',
        durationMs: 1234,
        params: { connections: 4 },
        runs: [
          { label: 'bare | uWS', target: 'bare-echo', load: load(100, 1000), serverCpuPct: 50 },
          { label: 'StreamInfer', target: 'streaminfer', error: 'failed to start\n```boom```' },
        ],
        ratios: [{ name: 'throughput served/bare', value: undefined, note: 'n' }],
        charts: [
          {
            file: 'ws-echo-throughput.svg',
            title: 'tp',
            svg: '<svg xmlns="http://www.w3.org/2000/svg"></svg>',
          },
        ],
        notes: ['a note'],
      },
    ],
  };
}

describe('markdown helpers', () => {
  it('escapes pipes and newlines in cells', () => {
    expect(escapeCell('a|b\nc')).toBe('a\\|b<br>c');
  });

  it('renders aligned tables with formatted numbers', () => {
    const t = markdownTable(
      ['name', 'n'],
      [
        ['x|y', 12345],
        ['z', 1.23456],
      ],
    );
    expect(t.split('\n')).toEqual(['| name | n |', '| --- | ---: |', '| x\\|y | 12,345 |', '| z | 1.23 |']);
    expect(markdownTable(['a'], [], ['center']).split('\n')[1]).toBe('| :---: |');
  });

  it('formats numbers', () => {
    expect(fmt(undefined)).toBe('–');
    expect(fmt(Number.POSITIVE_INFINITY)).toBe('∞');
    expect(fmt(1234.56)).toBe('1,235');
    expect(fmt(0.012345)).toBe('0.0123');
  });

  it('renders a runs table with failures', () => {
    const r = sampleReport().scenarios[0]!;
    const t = runsTable(r.runs);
    expect(t).toContain('| bare \\| uWS | 3/4 | 100 | overloaded: 1 |');
    expect(t).toContain('| StreamInfer | – | – | FAILED |');
    expect(t).toContain('91%');
  });
});

describe('report', () => {
  it('renders the whole report', () => {
    const md = renderReport(sampleReport());
    expect(md).toContain('# StreamInfer bench — 2025-01-02T03:04:05.678Z');
    expect(md).toContain('**Some scenarios or runs failed**');
    expect(md).toContain('| CPU | Test CPU × 2 |');
    expect(md).toContain('## ws-echo — FAILED');
    expect(md).toContain('![tp](ws-echo-throughput.svg)');
    expect(md).toContain('> a note');
    expect(md).toContain('1 connections failed to open (refused)');
    expect(md).toContain('closed early (codes 1013×1)');
    // code fences inside errors cannot break out of the block
    expect(md).toContain("'''boom'''");
  });

  it('writes latest/ and a timestamped copy, without SVG bodies in the JSON', () => {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'report-'));
    fs.mkdirSync(path.join(root, 'latest'));
    fs.writeFileSync(path.join(root, 'latest', 'stale.svg'), 'old');
    const { latest, stamped } = writeReport(sampleReport(), root);
    expect(path.basename(stamped)).toBe('2025-01-02T03-04-05.678Z');
    for (const dir of [latest, stamped]) {
      expect(fs.readdirSync(dir).sort()).toEqual(['report.json', 'report.md', 'ws-echo-throughput.svg']);
      const json = JSON.parse(fs.readFileSync(path.join(dir, 'report.json'), 'utf8')) as BenchReport;
      expect(json.scenarios[0]!.charts[0]).toEqual({ file: 'ws-echo-throughput.svg', title: 'tp' });
      expect(json.scenarios[0]!.runs[0]!.load!.inFlightPerConnection).toBe('Infinity');
    }
    fs.rmSync(root, { recursive: true, force: true });
  });

  it('reportJson is valid JSON', () => {
    expect(() => JSON.parse(reportJson(sampleReport()))).not.toThrow();
  });
});
