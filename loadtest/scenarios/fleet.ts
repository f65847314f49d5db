/**
 * fleet: what the cross-host epoch barrier costs. The same reload sequence, under the same closed-loop
 * `digits` traffic (8 WebSocket clients per host), on one host (`serve --nodes 1 --workers 1`, no
 * cluster) and on a fleet of 3 such hosts on 127.0.0.1 joined through NATS JetStream, every call issued
 * on the first host. Per reload: the server's `duration_ms`, the client's call time, and (fleet) every
 * host's `/health` epoch right after the call returned. Failed requests during the reload phase (every
 * error answer, timeout, early close and unmatched answer) must be 0.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fmt, markdownTable } from '../../scripts/markdown';
import { digitsDataPath, loadDigits } from '../../scripts/models/digits-data';
import { AdminCaller } from '../harness/admin-caller';
import { callText, scratchRepository, type TimedCall } from '../harness/admin-client';
import { errText, ratio, serverRecord } from '../harness/scenario-kit';
import type { ExitInfo, ServerHandle } from '../harness/server-process';
import { ClosedLoop, type RowSource, rowSource } from '../harness/stream-clients';
import { barChart, lineChart, PALETTE } from '../harness/svg-chart';
import { type AnswerRecord, latencyMs, latencyStats, overlaps } from '../harness/swap-analysis';
import type { Chart, RunRecord, Scenario, ScenarioContext, ScenarioResult } from '../harness/types';
import { type Check, checksMarkdown, checksNote } from '../harness/verdicts';
import { connectNats } from '../pipeline/broker';

const MODEL = 'digits';
const FLEET_HOSTS = 3;
const SETTLE_MS = 1000;

type Side = 'single' | 'fleet';
type Strategy = 'atomic' | 'rolling';

/** One admin call of the reload sequence. */
export interface PlannedCall {
  index: number;
  kind: 'candidate' | 'promote' | 'rollback' | 'reload';
  strategy: Strategy;
  path: string;
  body: Record<string, unknown>;
}

/**
 * `registryCalls` registry writes cycling candidate 1 → promote → rollback (the server starts on the
 * repository default, 2, so the cycle ends where it began; each call PREPAREs a new table), then
 * `rollingCalls` rolling reloads alternating versions 1 and 2.
 */
export function fleetPlan(registryCalls: number, rollingCalls: number): PlannedCall[] {
  const out: PlannedCall[] = [];
  const base = `/api/models/${MODEL}`;
  for (let i = 0; i < registryCalls; i++) {
    const kind = (['candidate', 'promote', 'rollback'] as const)[i % 3]!;
    out.push({
      index: out.length,
      kind,
      strategy: 'atomic',
      path: `${base}/${kind}`,
      body: kind === 'candidate' ? { version: '1' } : {},
    });
  }
  for (let i = 0; i < rollingCalls; i++)
    out.push({
      index: out.length,
      kind: 'reload',
      strategy: 'rolling',
      path: '/api/reload',
      body: { model: MODEL, version: i % 2 === 0 ? '1' : '2', strategy: 'rolling' },
    });
  return out;
}

/** Every host's `/health` epoch right after a call returned, and how long until they all matched it. */
export interface EpochCheck {
  epochs: (number | undefined)[];
  sameAtOnce: boolean;
  /** ms from the call's return until every host reported the call's epoch; undefined: never (3 s) */
  convergedMs: number | undefined;
}

export interface CallRecord extends PlannedCall {
  call: TimedCall;
  /** first attempt's start, bench clock */
  calledMs: number;
  attempts: number;
  serverMs: number | undefined;
  clientMs: number;
  epoch: number | undefined;
  /** per host: "h0:committed" … (fleet answers only) */
  hostStates: string[];
  epochCheck: EpochCheck;
}

interface SideRun {
  side: Side;
  hosts: number;
  answers: AnswerRecord[];
  unmatched: number;
  closes: number;
  calls: CallRecord[];
  t0: number;
  reloadStart: number;
  reloadEnd: number;
  tEnd: number;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);

function fleetSetup(ctx: ScenarioContext) {
  const clientsPerHost = 8;
  const registryCalls = ctx.quick ? 6 : 30;
  const rollingCalls = ctx.quick ? 2 : 10;
  const steadyMs = ctx.quick ? 2000 : 5000;
  const gapMs = 250;
  const natsUrl = process.env['STREAMINFER_TEST_NATS'] ?? 'nats://127.0.0.1:4222';
  const fleetName = `fbench${process.pid.toString(36)}${Math.random().toString(36).slice(2, 8)}`;
  const plan = fleetPlan(registryCalls, rollingCalls);
  const params = {
    single: 'serve --nodes 1 --workers 1 --model digits (no cluster)',
    fleet: `${FLEET_HOSTS} × serve --nodes 1 --workers 1 --cluster ${natsUrl} --fleet ${fleetName}, 127.0.0.1, distinct ports`,
    env: 'STREAMINFER_RATE_LIMIT_RPS=0, a fresh STREAMINFER_STATE_DIR per host',
    clientsPerHost,
    sequence: `${registryCalls} registry writes (candidate 1 → promote → rollback, atomic), then ${rollingCalls} rolling reloads 1 ↔ 2`,
    steadyMs,
    gapMs,
    issuedOn: 'host 0',
  };
  const digits = loadDigits(digitsDataPath(ctx.repoRoot));
  const rows: RowSource = rowSource(digits.pixels, 64);
  return { clientsPerHost, steadyMs, gapMs, natsUrl, fleetName, plan, params, rows };
}

type FleetSetup = ReturnType<typeof fleetSetup>;

async function epochsOf(admin: AdminCaller, hosts: readonly ServerHandle[]): Promise<(number | undefined)[]> {
  const answers = await Promise.all(hosts.map((h) => admin.get(`${h.baseUrl}/health`, 2000)));
  return answers.map((a) => num(a.body['epoch']));
}

async function checkEpochs(
  admin: AdminCaller,
  hosts: readonly ServerHandle[],
  epoch: number | undefined,
): Promise<EpochCheck> {
  const since = performance.now();
  const first = await epochsOf(admin, hosts);
  const all = (es: (number | undefined)[]): boolean => epoch !== undefined && es.every((e) => e === epoch);
  if (all(first)) return { epochs: first, sameAtOnce: true, convergedMs: 0 };
  while (performance.now() - since < 3000) {
    await sleep(50);
    if (all(await epochsOf(admin, hosts)))
      return { epochs: first, sameAtOnce: false, convergedMs: performance.now() - since };
  }
  return { epochs: first, sameAtOnce: false, convergedMs: undefined };
}

/** The reload sequence on `hosts[0]`, one call at a time; a 409 (a reload still running) is retried. */
async function driveCalls(
  ctx: ScenarioContext,
  setup: FleetSetup,
  side: Side,
  admin: AdminCaller,
  hosts: readonly ServerHandle[],
): Promise<CallRecord[]> {
  const out: CallRecord[] = [];
  for (const p of setup.plan) {
    let attempts = 0;
    let call: TimedCall;
    const calledMs = performance.now();
    for (;;) {
      attempts++;
      call = await admin.post(`${hosts[0]!.adminUrl}${p.path}`, p.body);
      if (call.status === 409 && attempts < 50) {
        await sleep(100);
        continue;
      }
      break;
    }
    const b = call.body;
    const epoch = num(b['epoch']);
    const fleet = b['fleet'] as { hosts?: { host: string; state: string }[] } | undefined;
    const epochCheck = await checkEpochs(admin, hosts, epoch);
    const rec: CallRecord = {
      ...p,
      call,
      calledMs,
      attempts,
      serverMs: num(b['duration_ms']),
      clientMs: call.returnedMs - calledMs,
      epoch,
      hostStates: (fleet?.hosts ?? []).map((h) => `${h.host}:${h.state}`),
      epochCheck,
    };
    out.push(rec);
    ctx.log(
      `fleet/${side}: ${p.index + 1}/${setup.plan.length} ${p.kind}${p.kind === 'reload' ? ` ${String(p.body['version'])} rolling` : ''}: ` +
        (call.status === 200
          ? `epoch ${String(epoch)}, ${String(rec.serverMs)} ms (call ${rec.clientMs.toFixed(0)} ms)` +
            (epochCheck.sameAtOnce ? '' : `, host epochs ${JSON.stringify(epochCheck.epochs)}`)
          : callText(call)),
    );
    await sleep(setup.gapMs);
  }
  return out;
}

/** Steady load, the reload sequence, steady load again; clients spread evenly over the hosts. */
async function driveSide(
  ctx: ScenarioContext,
  setup: FleetSetup,
  side: Side,
  hosts: readonly ServerHandle[],
): Promise<SideRun> {
  const loops = hosts.map(
    (h) =>
      new ClosedLoop({
        url: h.wsUrl,
        connections: setup.clientsPerHost,
        model: MODEL,
        rows: setup.rows,
        warmupPerConnection: 10,
        timeoutMs: 10_000,
      }),
  );
  let admin: AdminCaller | undefined;
  try {
    for (const l of loops) await l.open();
    admin = await AdminCaller.start(`${hosts[0]!.adminUrl}/health`);
    ctx.log(`fleet/${side}: ${loops.length * setup.clientsPerHost} clients on ${hosts.length} host(s)`);
    for (const l of loops) l.start();
    // the first second runs cold (JIT, batch sizes settling): left out of every figure but the failures
    await sleep(SETTLE_MS);
    const t0 = performance.now();
    await sleep(setup.steadyMs);
    const reloadStart = performance.now();
    const calls = await driveCalls(ctx, setup, side, admin, hosts);
    const reloadEnd = performance.now();
    await sleep(setup.steadyMs);
    const perHost = await Promise.all(loops.map((l) => l.stop()));
    const tEnd = performance.now();
    // connection numbers restart at 0 on each host: make them distinct
    const answers = perHost.flatMap((as, h) => as.map((a) => ({ ...a, conn: h * 1000 + a.conn })));
    return {
      side,
      hosts: hosts.length,
      answers,
      unmatched: loops.reduce((a, l) => a + l.unmatched, 0),
      closes: loops.reduce((a, l) => a + l.closes.length, 0),
      calls,
      t0,
      reloadStart,
      reloadEnd,
      tEnd,
    };
  } catch (e) {
    await Promise.all(loops.map((l) => l.stop().catch(() => undefined)));
    throw e;
  } finally {
    admin?.close();
  }
}

/** Log lines worth a look (warnings, errors, fencing), from a host's output tails. */
function oddLines(h: ServerHandle): string[] {
  return logLines(h)
    .filter((l) => /"level":(40|50|60)|\bWARN|\bERROR|fenced|in doubt|lease lost/i.test(l))
    .slice(-12);
}

function logLines(h: ServerHandle): string[] {
  return `${h.stdoutTail()}\n${h.stderrTail()}`.split('\n').filter((l) => l.trim() !== '');
}

interface Hosted<T> {
  value?: T;
  error?: string;
  servers: NonNullable<RunRecord['server']>[];
  odd: Record<string, string[]>;
  /** each host's last fleet lines (report.json only) */
  fleetLines: Record<string, string[]>;
}

/** Start `count` hosts (the first alone: it founds the fleet), run `body`, always stop them all. */
async function withHosts<T>(
  ctx: ScenarioContext,
  side: Side,
  count: number,
  extraArgs: (i: number) => string[],
  body: (hosts: ServerHandle[]) => Promise<T>,
): Promise<Hosted<T>> {
  const scratch = scratchRepository(ctx.repoRoot, [MODEL], `streaminfer-fbench${side}`);
  const stateDirs: string[] = [];
  const start = (i: number): Promise<ServerHandle> => {
    const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), `streaminfer-fbench-state${i}-`));
    stateDirs.push(stateDir);
    return ctx.startStreamInfer({
      label: `${side}-h${i}`,
      nodes: 1,
      workers: 1,
      args: ['--host', '127.0.0.1', '--models-dir', scratch.modelsDir, '--model', MODEL, ...extraArgs(i)],
      env: {
        STREAMINFER_RATE_LIMIT_RPS: '0',
        STREAMINFER_STATE_DIR: stateDir,
        STREAMINFER_LOG_LEVEL: 'info',
      },
    });
  };
  const hosts: ServerHandle[] = [];
  const out: Hosted<T> = { servers: [], odd: {}, fleetLines: {} };
  try {
    ctx.log(`fleet/${side}: starting ${count} host(s)`);
    hosts.push(await start(0));
    const rest = await Promise.allSettled(Array.from({ length: count - 1 }, (_, i) => start(i + 1)));
    for (const r of rest) if (r.status === 'fulfilled') hosts.push(r.value);
    const failed = rest.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) throw failed.reason;
    out.value = await body(hosts);
  } catch (e) {
    out.error = `${errText(e)}\n${hosts.map((h) => `--- ${h.label} stderr (tail) ---\n${h.stderrTail().slice(-2000)}`).join('\n')}`;
  }
  // stopped first: what a host says while leaving the fleet counts too
  const exits: (ExitInfo | undefined)[] = await Promise.all(hosts.map((h) => h.stop()));
  for (const h of hosts) {
    const odd = oddLines(h);
    if (odd.length) out.odd[h.label] = odd;
    const fl = logLines(h).filter((l) => /fleet/i.test(l));
    if (fl.length) out.fleetLines[h.label] = fl.slice(-30);
  }
  hosts.forEach((h, i) => out.servers.push(serverRecord(h, exits[i])));
  scratch.cleanup();
  for (const d of stateDirs) fs.rmSync(d, { recursive: true, force: true });
  return out;
}

/** The fleet's buckets (KV registry, hosts, lease; the model object store): every stream named after it. */
async function deleteFleetStreams(natsUrl: string, fleetName: string): Promise<string[]> {
  const nats = await connectNats({ servers: natsUrl, name: 'streaminfer-bench-fleet-cleanup' });
  const deleted: string[] = [];
  try {
    for await (const name of nats.jsm.streams.names()) {
      if (!name.endsWith(`_${fleetName}`) && !name.includes(`_${fleetName}_`)) continue;
      if (await nats.jsm.streams.delete(name).catch(() => false)) deleted.push(name);
    }
  } finally {
    await nats.close();
  }
  return deleted.sort();
}

/** Figures of one side: durations by strategy, throughput steady vs reload phase, failures. */
function sideFigures(m: SideRun) {
  const ok = m.answers.filter((a) => !a.error && a.sentMs >= m.t0);
  const reloadPhase = { start: m.reloadStart, end: m.reloadEnd };
  const inReload = (a: AnswerRecord): boolean => overlaps({ start: a.sentMs, end: a.recvMs }, reloadPhase);
  const failedReload = m.answers.filter((a) => a.error && inReload(a));
  const failedAll = m.answers.filter((a) => a.error);
  const reloadS = (m.reloadEnd - m.reloadStart) / 1000;
  const steadyS = (m.reloadStart - m.t0 + (m.tEnd - m.reloadEnd)) / 1000;
  const okIn = ok.filter((a) => a.recvMs >= m.reloadStart && a.recvMs < m.reloadEnd);
  const okBefore = ok.filter((a) => a.recvMs < m.reloadStart).length;
  const okAfter = ok.filter((a) => a.recvMs >= m.reloadEnd).length;
  // ok answers received while a call was in flight, over the calls' total time
  const inCallMs = m.calls.reduce((a, c) => a + (c.call.returnedMs - c.calledMs), 0);
  const okInCall = ok.filter((a) =>
    m.calls.some((c) => a.recvMs >= c.calledMs && a.recvMs < c.call.returnedMs),
  ).length;
  const by = (s: Strategy) => m.calls.filter((c) => c.strategy === s);
  const errorsByCode: Record<string, number> = {};
  for (const a of failedAll) errorsByCode[a.error!] = (errorsByCode[a.error!] ?? 0) + 1;
  return {
    requests: m.answers.filter((a) => a.sentMs >= m.t0).length,
    ok: ok.length,
    failedReload: failedReload.length + m.unmatched + m.closes,
    failedAll: failedAll.length + m.unmatched + m.closes,
    errorsByCode,
    steadyRps: (okBefore + okAfter) / steadyS,
    beforeRps: okBefore / ((m.reloadStart - m.t0) / 1000),
    afterRps: okAfter / ((m.tEnd - m.reloadEnd) / 1000),
    reloadRps: okIn.length / reloadS,
    inCallRps: okInCall / (inCallMs / 1000),
    latSteady: latencyStats(ok.filter((a) => !inReload(a)).map(latencyMs)),
    latReload: latencyStats(ok.filter(inReload).map(latencyMs)),
    server: {
      atomic: latencyStats(by('atomic').map((c) => c.serverMs ?? Number.NaN)),
      rolling: latencyStats(by('rolling').map((c) => c.serverMs ?? Number.NaN)),
    },
    client: {
      atomic: latencyStats(by('atomic').map((c) => c.clientMs)),
      rolling: latencyStats(by('rolling').map((c) => c.clientMs)),
    },
    notCommitted: m.calls.filter(
      // atomic hosts answer `committed`, rolling ones `rolled`
      (c) => c.call.status !== 200 || c.hostStates.some((s) => !/:(committed|rolled)$/.test(s)),
    ),
    epochSplit: m.calls.filter((c) => !c.epochCheck.sameAtOnce),
    epochNever: m.calls.filter((c) => c.epochCheck.convergedMs === undefined),
  };
}

type SideFigures = ReturnType<typeof sideFigures>;

function fleetChecks(single: SideFigures | undefined, fleet: SideFigures | undefined): Check[] {
  const failed = (name: string, f: SideFigures | undefined): Check => ({
    name: `failed requests during the reload phase, ${name}`,
    target: '0',
    measured: f ? String(f.failedReload) : 'n/a',
    pass: f ? f.failedReload === 0 : undefined,
    detail: f
      ? `${f.failedAll} over the whole run${Object.keys(f.errorsByCode).length ? `: ${JSON.stringify(f.errorsByCode)}` : ''}`
      : 'side not measured',
  });
  const committed = (name: string, f: SideFigures | undefined): Check => ({
    name: `every reload committed, ${name}`,
    target: 'all 200, every host committed',
    measured: f ? `${f.notCommitted.length} not` : 'n/a',
    pass: f ? f.notCommitted.length === 0 : undefined,
    detail: f?.notCommitted
      .slice(0, 3)
      .map(
        (c) =>
          `#${c.index + 1} ${c.kind}: ${c.call.status === 200 ? c.hostStates.join(' ') : callText(c.call)}`,
      )
      .join('; '),
  });
  return [
    failed('single host', single),
    failed('fleet', fleet),
    committed('single host', single),
    committed('fleet', fleet),
    {
      name: 'every host at the reload’s epoch right after it returned (fleet)',
      target: 'all reloads',
      measured: fleet ? `${fleet.epochSplit.length} split` : 'n/a',
      pass: fleet ? fleet.epochSplit.length === 0 : undefined,
      detail: fleet?.epochSplit.length
        ? `${fleet.epochNever.length} never within 3 s; e.g. ${fleet.epochSplit
            .slice(0, 3)
            .map((c) => `#${c.index + 1} epoch ${String(c.epoch)} vs ${JSON.stringify(c.epochCheck.epochs)}`)
            .join('; ')}`
        : undefined,
    },
  ];
}

const ms = (v: number | undefined): string => (v === undefined ? '–' : v.toFixed(1));

function fleetMarkdown(
  runs: Partial<Record<Side, { m: SideRun; f: SideFigures }>>,
  checks: Check[],
  odd: Record<string, string[]>,
  cleanup: string,
): string {
  const sides = (['single', 'fleet'] as const).filter((s) => runs[s]);
  const out: string[] = ['### Done-when', '', checksMarkdown(checks), ''];
  out.push('### Reload duration (ms)', '');
  const durRows: (string | number)[][] = [];
  for (const strategy of ['atomic', 'rolling'] as const)
    for (const s of sides) {
      const f = runs[s]!.f;
      const sv = f.server[strategy];
      const cl = f.client[strategy];
      if (!sv.n && !cl.n) continue;
      durRows.push([
        `${s} ${strategy}`,
        cl.n,
        ms(sv.p50),
        ms(sv.p95),
        ms(sv.max),
        ms(cl.p50),
        ms(cl.p95),
        ms(cl.max),
      ]);
    }
  out.push(
    markdownTable(
      ['side', 'reloads', 'server p50', 'server p95', 'server max', 'call p50', 'call p95', 'call max'],
      durRows,
      ['left', 'right', 'right', 'right', 'right', 'right', 'right', 'right'],
    ),
    '',
    'Server = the answer’s `duration_ms`; call = client-side time of the HTTP call (from a child process). ' +
      'Atomic = registry writes (candidate / promote / rollback), rolling = `POST /api/reload {strategy: "rolling"}`.',
    '',
    '### Load',
    '',
    markdownTable(
      [
        'side',
        'hosts',
        'requests',
        'ok',
        'failed (reload phase)',
        'failed (all)',
        'steady req/s',
        'before',
        'after',
        'reload-phase req/s',
        'in-call req/s',
        'reload ÷ steady',
        'p50 steady',
        'p99 steady',
        'p50 reload',
        'p99 reload',
      ],
      sides.map((s) => {
        const { m, f } = runs[s]!;
        return [
          s,
          m.hosts,
          f.requests,
          f.ok,
          f.failedReload,
          f.failedAll,
          fmt(f.steadyRps),
          fmt(f.beforeRps),
          fmt(f.afterRps),
          fmt(f.reloadRps),
          fmt(f.inCallRps),
          fmt(ratio(f.reloadRps, f.steadyRps)),
          ms(f.latSteady.p50),
          ms(f.latSteady.p99),
          ms(f.latReload.p50),
          ms(f.latReload.p99),
        ];
      }),
    ),
    '',
    'Reload phase = first call start → last call’s return (250 ms gaps and the epoch checks included); ' +
      'failed = error answers, client timeouts (10 s), closed connections, unmatched answers of requests ' +
      'in flight during it (failed (all): over the whole run, its first, unmeasured second included). ' +
      'Steady = the same time before and after, from 1 s after the clients started. In-call = ok answers received while a ' +
      'reload call was in flight ÷ the calls’ total time (short calls: a noisy figure).',
    '',
    '### Every call',
    '',
  );
  out.push(
    markdownTable(
      [
        'side',
        '#',
        'call',
        'status',
        'epoch',
        'server ms',
        'call ms',
        'hosts',
        'host epochs after',
        'converged ms',
      ],
      sides.flatMap((s) =>
        runs[s]!.m.calls.map((c) => [
          s,
          c.index + 1,
          c.kind === 'reload' ? `reload ${String(c.body['version'])} rolling` : c.kind,
          c.call.status + (c.attempts > 1 ? ` (${c.attempts} tries)` : ''),
          String(c.epoch ?? '–'),
          ms(c.serverMs),
          ms(c.clientMs),
          c.hostStates.join(' '),
          c.epochCheck.epochs.map((e) => String(e ?? '?')).join(' '),
          ms(c.epochCheck.convergedMs),
        ]),
      ),
    ),
    '',
  );
  if (Object.keys(odd).length) {
    out.push('### Host log lines worth a look (warnings, errors, fencing)', '');
    for (const [host, lines] of Object.entries(odd)) out.push(`- ${host}:`, '', '```', ...lines, '```', '');
  }
  out.push(`NATS clean-up: ${cleanup}`, '');
  return out.join('\n');
}

function fleetCharts(runs: Partial<Record<Side, { m: SideRun; f: SideFigures }>>): Chart[] {
  const series = (['single', 'fleet'] as const).flatMap((s, i) => {
    const r = runs[s];
    if (!r) return [];
    return [
      {
        name: `${s} (server)`,
        color: PALETTE[i * 2]!,
        points: r.m.calls.map((c): [number, number] => [c.index + 1, c.serverMs ?? Number.NaN]),
      },
      {
        name: `${s} (call)`,
        color: PALETTE[i * 2 + 1]!,
        points: r.m.calls.map((c): [number, number] => [c.index + 1, c.clientMs]),
      },
    ];
  });
  const firstRolling = (runs.single ?? runs.fleet)?.m.calls.find((c) => c.strategy === 'rolling');
  const charts: Chart[] = [
    {
      file: 'fleet-reload-duration.svg',
      title: 'fleet: reload duration per reload, single host vs fleet',
      svg: lineChart({
        title: 'Reload duration per reload (ms): single host vs 3-host fleet',
        xLabel: 'reload #',
        yLabel: 'ms',
        series,
        markers: firstRolling ? [{ x: firstRolling.index + 1, label: 'rolling →' }] : [],
      }),
    },
  ];
  for (const side of ['single', 'fleet'] as const) {
    const r = runs[side];
    if (r) charts.push(timeline(r.m));
  }
  const bars = (['single', 'fleet'] as const).flatMap((s, i) => {
    const r = runs[s];
    if (!r) return [];
    return [
      { label: `${s} steady`, value: r.f.steadyRps, color: PALETTE[i * 2]! },
      { label: `${s} reloads`, value: r.f.reloadRps, color: PALETTE[i * 2 + 1]! },
    ];
  });
  charts.push({
    file: 'fleet-throughput.svg',
    title: 'fleet: throughput steady vs during reloads',
    svg: barChart({ title: 'Throughput, steady vs reload phase (ok answers/s)', unit: 'req/s', bars }),
  });
  return charts;
}

/** Ok answers per second (250 ms buckets) over the run, a marker at each call: c / p / r / R = candidate / promote / rollback / rolling. */
function timeline(m: SideRun): Chart {
  const bucketMs = 250;
  const counts = new Map<number, number>();
  for (const a of m.answers)
    if (!a.error && a.recvMs >= m.t0) {
      const b = Math.floor((a.recvMs - m.t0) / bucketMs);
      counts.set(b, (counts.get(b) ?? 0) + 1);
    }
  const last = Math.floor((m.tEnd - m.t0) / bucketMs);
  const points = Array.from({ length: last }, (_, b): [number, number] => [
    (b * bucketMs) / 1000,
    ((counts.get(b) ?? 0) * 1000) / bucketMs,
  ]);
  const letter = { candidate: 'c', promote: 'p', rollback: 'r', reload: 'R' } as const;
  return {
    file: `fleet-timeline-${m.side}.svg`,
    title: `fleet: ${m.side} — answers/s with each reload call`,
    svg: lineChart({
      title: `${m.side === 'fleet' ? `${m.hosts}-host fleet` : 'single host'}: ok answers/s (250 ms buckets), reload calls marked`,
      xLabel: 'seconds since the measured start',
      yLabel: 'answers/s',
      series: [{ name: 'ok answers/s', color: PALETTE[0]!, points }],
      markers: m.calls.map((c) => ({ x: (c.calledMs - m.t0) / 1000, label: letter[c.kind] })),
    }),
  };
}

export const fleet: Scenario = {
  name: 'fleet',
  description:
    'Reload duration across a 3-host fleet (NATS JetStream, hosts on 127.0.0.1) vs one host, same ' +
    'sequence under the same load: 8 closed-loop `digits` WebSocket clients per host, registry writes ' +
    '(candidate → promote → rollback, atomic) then rolling reloads, all issued on one host. Figures: ' +
    'server duration_ms and call time p50/p95/max, fleet ÷ single, failed requests during the reload ' +
    'phase (target 0), throughput during reloads vs steady, every host’s /health epoch after each fleet ' +
    'reload. 30 + 10 reloads; `--quick`: 6 + 2.',
  async run(ctx): Promise<ScenarioResult> {
    const setup = fleetSetup(ctx);
    const runs: Partial<Record<Side, { m: SideRun; f: SideFigures }>> = {};
    const records: RunRecord[] = [];
    const odd: Record<string, string[]> = {};
    const fleetLines: Record<string, string[]> = {};
    const servers: Partial<Record<Side, NonNullable<RunRecord['server']>[]>> = {};
    const notes: string[] = [];
    const sides: [Side, number, (i: number) => string[]][] = [
      ['single', 1, () => []],
      [
        'fleet',
        FLEET_HOSTS,
        (i) => ['--cluster', setup.natsUrl, '--fleet', setup.fleetName, '--host-id', `fbench-h${i}`],
      ],
    ];
    let cleanup = 'nothing to delete';
    for (const [side, count, args] of sides) {
      const hosted = await withHosts(ctx, side, count, args, (hosts) => driveSide(ctx, setup, side, hosts));
      Object.assign(odd, hosted.odd);
      Object.assign(fleetLines, hosted.fleetLines);
      if (side === 'fleet') {
        try {
          const deleted = await deleteFleetStreams(setup.natsUrl, setup.fleetName);
          cleanup = deleted.length ? `deleted ${deleted.join(', ')}` : 'no stream of this fleet found';
        } catch (e) {
          cleanup = `failed: ${errText(e)}`;
        }
      }
      servers[side] = hosted.servers;
      if (hosted.value) {
        runs[side] = { m: hosted.value, f: sideFigures(hosted.value) };
      } else {
        // only a side that could not be measured is a run: it fails the scenario's status
        records.push({
          label: side,
          target: side,
          error: hosted.error,
          ...(hosted.servers[0] ? { server: hosted.servers[0] } : {}),
        });
        notes.push(`${side}: not measured — ${(hosted.error ?? '').split('\n')[0]}`);
      }
    }
    const s = runs.single?.f;
    const f = runs.fleet?.f;
    const checks = fleetChecks(s, f);
    notes.unshift(checksNote('fleet done-when', checks));
    if (ctx.cores <= 4)
      notes.push(
        `This host has ${ctx.cores} cores: the fleet side runs 3 supervisors + 3 nodes + nats-server + 24 clients ` +
          'on them, the single side 1 + 1 + 8 clients, so absolute throughput is not comparable; the reload ' +
          'durations and the failures are the point.',
      );
    const ratios = [
      { name: 'throughput in reload calls / steady, single', value: ratio(s?.inCallRps, s?.steadyRps) },
      { name: 'throughput in reload calls / steady, fleet', value: ratio(f?.inCallRps, f?.steadyRps) },
      {
        name: 'reload duration p50, fleet/single (atomic, server)',
        value: ratio(f?.server.atomic.p50, s?.server.atomic.p50),
      },
      {
        name: 'reload duration p95, fleet/single (atomic, server)',
        value: ratio(f?.server.atomic.p95, s?.server.atomic.p95),
      },
      {
        name: 'reload call p50, fleet/single (atomic, client)',
        value: ratio(f?.client.atomic.p50, s?.client.atomic.p50),
      },
      {
        name: 'reload duration p50, fleet/single (rolling, server)',
        value: ratio(f?.server.rolling.p50, s?.server.rolling.p50),
      },
      { name: 'throughput reload phase / steady, single', value: ratio(s?.reloadRps, s?.steadyRps) },
      { name: 'throughput reload phase / steady, fleet', value: ratio(f?.reloadRps, f?.steadyRps) },
    ];
    return {
      params: setup.params,
      runs: records,
      ratios,
      charts: fleetCharts(runs),
      notes,
      markdown: fleetMarkdown(runs, checks, odd, cleanup),
      data: {
        checks,
        cleanup,
        servers,
        hostLogLines: odd,
        fleetLogLines: fleetLines,
        sides: Object.fromEntries(
          Object.entries(runs).map(([side, r]) => [
            side,
            {
              ...r.f,
              notCommitted: r.f.notCommitted.map((c) => c.index),
              epochSplit: r.f.epochSplit.map((c) => c.index),
              epochNever: r.f.epochNever.map((c) => c.index),
              windowsMs: {
                steadyBefore: r.m.reloadStart - r.m.t0,
                reload: r.m.reloadEnd - r.m.reloadStart,
                steadyAfter: r.m.tEnd - r.m.reloadEnd,
              },
              calls: r.m.calls.map((c) => ({
                index: c.index,
                kind: c.kind,
                strategy: c.strategy,
                status: c.call.status,
                attempts: c.attempts,
                epoch: c.epoch,
                serverMs: c.serverMs,
                clientMs: c.clientMs,
                hosts: c.hostStates,
                epochCheck: c.epochCheck,
                ...(c.call.status !== 200 ? { body: c.call.body } : {}),
              })),
            },
          ]),
        ),
      },
    };
  },
};
