/**
 * Noisy neighbours: each attack runs against one node while a victim client on the same node sends a
 * steady 100 requests/s from its own address, measures its latency and checks every answer. Per attack the
 * victim's baseline is measured first (same victim load, same server, just before the attack), then:
 * victim p99 ≤ 3 × max(baseline p99, 10 ms) — the 10 ms floor because a millisecond loopback baseline on shared
 * cores would make the bound a measure of scheduler noise (baselines of 2–70 ms were seen with other test runs on
 * the same 2 cores) —, 0 victim errors (error answers, wrong
 * answers, answers missing after 5 s), node pids unchanged and /health 200, and the attacker sees only typed
 * refusals (known error codes) or a 1008 close. Attackers run in their own process (noisy-attacker.ts), bounded
 * by frames and time (4 s), each from its own loopback address (127.0.0.x), so limits keyed per address see
 * attacker and victim as two clients.
 */
import { ERROR_CODES } from '../../libs/protocol';
import type { ServerHandle } from './harness';
import { modelsSubset, postJson, startServer, WsClient } from './harness';
import { expectedVectors, LOOKUP_IDS, LOOKUP_ROWS, writeLookupModel } from './lookup-model';
import type { AttackSpec, Outcome } from './noisy-attacker';
import { percentile, startAttacker, Victim, type VictimWork } from './noisy-kit';
import { pixels, quickPlan, type View, waitFor } from './rollout-kit';

const VICTIM_ADDRESS = '127.0.0.2';
/** The victim's steady rate: one request every 10 ms. */
const INTERVAL_MS = 10;
const WARMUP_MS = 500;
const BASELINE_MS = 2500;
const ATTACK_MS = 4000;
/** Victim p99 under attack ≤ BOUND × max(baseline p99, FLOOR_MS). */
const BOUND = 3;
const FLOOR_MS = 10;
/** Trials per attack when only the latency bound failed. */
const TRIALS = 2;
/** Per-client rate limit of this server (the victim's 100/s stays well under it). */
const RATE_RPS = 200;
const RATE_BURST = 200;
/** Connections one address may hold. */
const PER_IP_CAP = 16;
const SEED = 24;

const echoWork: VictimWork = {
  body: (seq) => ({ model: 'echo', input: [seq, seq + 0.5, -seq] }),
  check: (seq, answer) => {
    const result = answer.result as number[];
    return JSON.stringify(result) === JSON.stringify([seq, seq + 0.5, -seq])
      ? undefined
      : `echo answered ${JSON.stringify(result).slice(0, 100)}`;
  },
};

const victimIds = (seq: number): number[] =>
  Array.from({ length: LOOKUP_IDS }, (_, k) => (seq * 3 + k * 5) % LOOKUP_ROWS);
const lookupWork: VictimWork = {
  body: (seq) => ({ model: 'lookup', input: victimIds(seq) }),
  check: (seq, answer) => {
    const got = (answer.result as unknown[]).flat(2);
    return JSON.stringify(got) === JSON.stringify(expectedVectors(victimIds(seq)))
      ? undefined
      : `lookup answered ${JSON.stringify(got)}`;
  },
};

interface Figures {
  attack: string;
  baselineP99: number;
  attackP99: number;
  bound: number;
  samples: [number, number];
  errors: number;
  outcome: Outcome;
}

let server: ServerHandle;
let victim: Victim;
const figures: Figures[] = [];

beforeAll(async () => {
  const modelsDir = modelsSubset(['echo', 'digits']);
  // fixed: every batch waits 5 ms for company, so the attacker's and the victim's requests share batches.
  writeLookupModel(modelsDir, { policy: 'fixed', max_batch_size: 64, max_queue_delay_ms: 5 });
  server = await startServer({
    modelsDir,
    args: ['--nodes', '1', '--workers', '1'],
    env: {
      STREAMINFER_RATE_LIMIT_RPS: String(RATE_RPS),
      STREAMINFER_RATE_LIMIT_BURST: String(RATE_BURST),
      STREAMINFER_RATE_LIMIT_KEY: 'ip',
      STREAMINFER_MAX_CONNECTIONS_PER_IP: String(PER_IP_CAP),
    },
  });
  victim = await Victim.connect(server.wsUrl, VICTIM_ADDRESS, echoWork);
}, 60000);

afterAll(async () => {
  victim?.close();
  for (const f of figures)
    console.log(
      `noisy-neighbour ${f.attack}: victim p99 baseline ${f.baselineP99.toFixed(2)} ms, under attack ${f.attackP99.toFixed(2)} ms (ratio ${(f.attackP99 / f.baselineP99).toFixed(2)}, bound ${f.bound.toFixed(1)} ms; ${f.samples[0]}/${f.samples[1]} samples), ${f.errors} victim errors; attacker sent ${f.outcome.sent}, answers ${JSON.stringify(f.outcome.answers)}, closes ${JSON.stringify(f.outcome.closes)}, refused ${JSON.stringify(f.outcome.refused)}, opened ${f.outcome.opened}`,
    );
  if (server) expect(await server.stop()).toEqual({ code: 0, signal: null });
});

/** What is wrong with the node after an attack: a restarted node process or a failing /health. */
async function nodeProblems(): Promise<string[]> {
  try {
    const response = await fetch(`${server.url}/health`, { signal: AbortSignal.timeout(5000) });
    const health = (await response.json()) as { nodes?: { pid: number }[] };
    const pids = (health.nodes ?? []).map((n) => n.pid);
    const problems = response.status === 200 ? [] : [`/health answered ${response.status}`];
    if (JSON.stringify(pids) !== JSON.stringify(server.nodePids))
      problems.push(`node pids ${JSON.stringify(pids)}, were ${JSON.stringify(server.nodePids)}`);
    return problems;
  } catch (error) {
    return [`/health: ${String(error)}`];
  }
}

/** Waits (at most 15 s) until the node answers ten echo requests in a row within 25 ms each. */
async function settle(): Promise<void> {
  const deadline = Date.now() + 15000;
  let client: WsClient | undefined;
  try {
    client = await WsClient.connect(server.wsUrl);
    for (let fast = 0, id = 0; fast < 10 && Date.now() < deadline; id++) {
      const sentAt = performance.now();
      await client.request({ id, model: 'echo', input: [id] }, 15000);
      fast = performance.now() - sentAt <= 25 ? fast + 1 : 0;
    }
  } catch {
    // a node that does not answer is reported by nodeProblems
  } finally {
    client?.close();
  }
}

/**
 * What is wrong with the attacker's outcome: an answer code outside the known set, a connection failure other
 * than a typed refusal, or no refusal at all (`refusals`: the answer codes that count as one, besides refused
 * upgrades and 1008 closes).
 */
function attackerProblems(outcome: Outcome, refusals: readonly string[]): string[] {
  const known = new Set<string>(['ok', ...ERROR_CODES]);
  const problems: string[] = [];
  const unknown = Object.keys(outcome.answers).filter((code) => !known.has(code.replace(/^\d+ /, '')));
  if (unknown.length > 0) problems.push(`attacker got untyped answers ${JSON.stringify(unknown)}`);
  if (Object.keys(outcome.failures).length > 0)
    problems.push(`attacker connections failed ${JSON.stringify(outcome.failures)}`);
  const refused =
    refusals.reduce((sum, code) => sum + (outcome.answers[code] ?? 0), 0) +
    Object.values(outcome.refused).reduce((a, b) => a + b, 0) +
    (outcome.closes['1008'] ?? 0);
  if (refused === 0) problems.push('attacker was never refused (no typed refusal, no 1008 close)');
  return problems;
}

type AttackInput = Omit<AttackSpec, 'port' | 'seed'>;

/**
 * Baseline, then the attack under the same victim load; returns what the victim saw and every requirement it
 * broke (latency bound, errors, node intact). `during` starts with the attacker (the victim keeps sending until
 * both are done). A trial whose only broken requirement is the latency bound is run once more (other processes
 * on shared cores can stall one 4 s window; a stall the attack causes shows in both): never a trial with victim
 * errors, a restarted node or an attacker let through.
 */
async function underAttack(
  attack: string,
  work: VictimWork,
  spec: AttackInput | ((trial: number) => AttackInput),
  during?: (trial: number) => Promise<unknown>,
): Promise<{ outcome: Outcome; problems: string[] }> {
  for (let trial = 1; ; trial++) {
    const input = typeof spec === 'function' ? spec(trial) : spec;
    const result = await oneTrial(`${attack}${trial > 1 ? ` (trial ${trial})` : ''}`, work, input, () =>
      during?.(trial),
    );
    if (trial === TRIALS || result.problems.length !== 1 || !result.slow) return result;
  }
}

async function oneTrial(
  attack: string,
  work: VictimWork,
  spec: AttackInput,
  during: () => Promise<unknown> | undefined,
): Promise<{ outcome: Outcome; problems: string[]; slow: boolean }> {
  const problems = await nodeProblems();
  // What the last attack left behind (a backlog still being answered, sockets closing) is not this baseline's.
  await settle();
  // The attacker's process is up and idle during the baseline: only its attack differs between the phases.
  const attacker = startAttacker({ ...spec, port: server.port, seed: SEED });
  await attacker.ready;
  await victim.run(WARMUP_MS, INTERVAL_MS, work);
  const baseline = await victim.run(BASELINE_MS, INTERVAL_MS, work);
  if (baseline.errors.length > 0) problems.push(`baseline errors: ${baseline.errors.slice(0, 3).join('; ')}`);
  attacker.go();
  const alongside = during();
  const phase = await victim.run(
    ATTACK_MS + 8000,
    INTERVAL_MS,
    work,
    // At least ATTACK_MS even when the attacker is closed early: the same window as the baseline's load.
    Promise.all([attacker.done, alongside, new Promise((resolve) => setTimeout(resolve, ATTACK_MS))]).catch(
      () => undefined,
    ),
  );
  const outcome = await attacker.done;
  const baselineP99 = percentile(baseline.latencies, 99);
  const attackP99 = percentile(phase.latencies, 99);
  const bound = BOUND * Math.max(baselineP99, FLOOR_MS);
  figures.push({
    attack,
    baselineP99,
    attackP99,
    bound,
    samples: [baseline.latencies.length, phase.latencies.length],
    errors: phase.errors.length,
    outcome,
  });
  if (baseline.latencies.length < 150) problems.push(`only ${baseline.latencies.length} baseline samples`);
  if (phase.latencies.length < 250) problems.push(`only ${phase.latencies.length} samples under attack`);
  if (phase.errors.length > 0)
    problems.push(`${phase.errors.length} victim errors: ${phase.errors.slice(0, 3).join('; ')}`);
  const slow = !(attackP99 <= bound);
  if (slow)
    problems.push(
      `victim p99 ${attackP99.toFixed(1)} ms > ${BOUND} × max(baseline ${baselineP99.toFixed(1)}, ${FLOOR_MS}) ms`,
    );
  problems.push(...(await nodeProblems()));
  console.log(
    `noisy-neighbour ${attack}: baseline p99 ${baselineP99.toFixed(2)} ms, attack p99 ${attackP99.toFixed(2)} ms (p50 ${percentile(phase.latencies, 50).toFixed(2)}, p90 ${percentile(phase.latencies, 90).toFixed(2)}, max ${percentile(phase.latencies, 100).toFixed(2)}), ${phase.errors.length} victim errors; attacker ${JSON.stringify(outcome)}${problems.length > 0 ? `; FAILED: ${problems.join(' | ')}` : ''}`,
  );
  return { outcome, problems, slow };
}

/** What an address may be granted in `ms` under its token bucket (with a 25 % margin for timing). */
const budget = (ms: number): number => Math.ceil((RATE_BURST + (RATE_RPS * ms) / 1000) * 1.25);

/** An address's answers computed, past its budget, as a broken requirement. */
function withinBudget(outcome: Outcome, ms: number): string[] {
  const ok = outcome.answers.ok ?? 0;
  return ok <= budget(ms)
    ? []
    : [`attacker got ${ok} requests computed, its address's budget is ${budget(ms)}`];
}

test('malformed flood from one connection: 1-byte text frames and garbage binary frames', async () => {
  const { outcome, problems } = await underAttack('malformed flood', echoWork, {
    kind: 'malformed',
    localAddress: '127.0.0.3',
    connections: 1,
    durationMs: ATTACK_MS,
    maxFrames: 2_000_000,
  });
  if (outcome.answers.ok) problems.push(`${outcome.answers.ok} malformed frames answered as requests`);
  expect([...problems, ...attackerProblems(outcome, ['bad_request', 'rate_limited'])]).toEqual([]);
}, 60000);

test('valid flood past the rate limit from one connection', async () => {
  const { outcome, problems } = await underAttack('valid flood, 1 connection', echoWork, {
    kind: 'flood',
    localAddress: '127.0.0.4',
    connections: 1,
    durationMs: ATTACK_MS,
    maxFrames: 2_000_000,
  });
  problems.push(...withinBudget(outcome, ATTACK_MS + 2000));
  expect([...problems, ...attackerProblems(outcome, ['rate_limited'])]).toEqual([]);
}, 60000);

test('valid flood from many connections of one address: the rate limit is per address', async () => {
  const { outcome, problems } = await underAttack('valid flood, 8 connections 1 address', echoWork, {
    kind: 'flood',
    localAddress: '127.0.0.5',
    connections: 8,
    durationMs: ATTACK_MS,
    maxFrames: 500_000,
  });
  // One address, one budget: eight connections buy nothing.
  problems.push(...withinBudget(outcome, ATTACK_MS + 2000));
  expect([...problems, ...attackerProblems(outcome, ['rate_limited'])]).toEqual([]);
}, 60000);

test('poison requests (out-of-range Gather ids) sharing batches with the victim', async () => {
  // About 200 poison requests a second next to the victim's 100 on a model whose batches wait 5 ms: most
  // victim requests share a batch with one.
  const { outcome, problems } = await underAttack('poison requests', lookupWork, {
    kind: 'poison',
    localAddress: '127.0.0.6',
    connections: 1,
    durationMs: ATTACK_MS,
    maxFrames: 1000,
    perTurn: 1,
    pauseMs: 5,
  });
  if (outcome.answers.ok) problems.push(`${outcome.answers.ok} poison requests answered as computed`);
  expect([...problems, ...attackerProblems(outcome, ['model_error', 'rate_limited'])]).toEqual([]);
}, 60000);

test('zero-dim and giant shapes over /v2 and in binary frames', async () => {
  const { outcome, problems } = await underAttack('zero-dim and giant shapes', echoWork, {
    kind: 'shapes',
    localAddress: '127.0.0.7',
    connections: 1,
    durationMs: ATTACK_MS,
    maxFrames: 400,
  });
  const accepted = Object.keys(outcome.answers).filter((code) => code === 'ok' || code.startsWith('200'));
  if (accepted.length > 0) problems.push(`shapes accepted: ${JSON.stringify(accepted)}`);
  const refusals = ['shape_mismatch', 'bad_request', '400 shape_mismatch', '400 bad_request'];
  expect([...problems, ...attackerProblems(outcome, refusals)]).toEqual([]);
}, 60000);

test('many connections from one address: past the per-address cap they are refused at upgrade', async () => {
  const { outcome, problems } = await underAttack('connections past the per-address cap', echoWork, {
    kind: 'connections',
    localAddress: '127.0.0.8',
    connections: PER_IP_CAP * 4,
    durationMs: ATTACK_MS,
    maxFrames: 0,
    pauseMs: 200,
  });
  if (outcome.opened > PER_IP_CAP) problems.push(`${outcome.opened} connections opened, cap ${PER_IP_CAP}`);
  const codes = new Set<string>(ERROR_CODES);
  const untyped = Object.keys(outcome.refused).filter(
    (key) => !/^(429|503) /.test(key) || !codes.has(key.slice(4)),
  );
  if (untyped.length > 0) problems.push(`untyped upgrade refusals ${JSON.stringify(untyped)}`);
  expect([...problems, ...attackerProblems(outcome, [])]).toEqual([]);
}, 60000);

test('pinned-deadline requests for the candidate do not roll a healthy rollout back', async () => {
  // Expected labels per version, asked (pinned) before the rollout starts.
  const rows = Array.from({ length: 20 }, (_, i) => i);
  const expected = new Map<string, string>();
  for (const version of ['1', '2'])
    for (const row of rows) {
      const answer = await postJson(`${server.url}/predict`, {
        model: 'digits',
        version,
        input: pixels(row),
      });
      expected.set(`${version}/${row}`, (answer.body.result as { label: string }).label);
    }
  const digitsWork: VictimWork = {
    body: (seq) => ({ model: 'digits', input: pixels(rows[seq % rows.length]!) }),
    check: (seq, answer) => {
      const label = (answer.result as { label?: string } | undefined)?.label;
      const want = expected.get(`${String(answer.version)}/${rows[seq % rows.length]}`);
      return label !== undefined && label === want
        ? undefined
        : `digits v${String(answer.version)} answered ${label}, expected ${want}`;
    },
  };
  // A healthy candidate gated by error rate only, started with the attack: v1 over the default stable v2 (a
  // second trial, after v1 was promoted, rolls v2 out over it).
  const candidate = (trial: number): string => (trial === 1 ? '1' : '2');
  let finished: Promise<View> | undefined;
  const rollout = async (trial: number): Promise<View> => {
    const plan = { ...quickPlan([50]), version: candidate(trial) };
    const start = await postJson(`${server.adminUrl}/api/models/digits/rollout`, plan);
    expect(start.status).toBe(200);
    finished = waitFor(server.adminUrl, (view) => view.state !== 'progressing', 15000);
    return finished;
  };
  // Two connections of one address, each about 100 pinned requests a second (the address's budget is 200/s):
  // the steering itself, not a flood.
  const { outcome, problems } = await underAttack(
    'pinned-deadline rollout steering',
    digitsWork,
    (trial) => ({
      kind: 'pinned',
      localAddress: '127.0.0.10',
      connections: 2,
      durationMs: ATTACK_MS,
      maxFrames: 1000,
      perTurn: 1,
      pauseMs: 10,
      version: candidate(trial),
    }),
    rollout,
  );
  expect(finished).toBeDefined();
  const view = await finished!;
  if (view.state !== 'promoted')
    problems.push(
      `rollout ${view.state}: ${view.transitions.map((t) => `${t.from}>${t.to}:${t.reason}`).join(', ')} (${view.reason})`,
    );
  if (outcome.answers.ok) problems.push(`${outcome.answers.ok} pinned requests met a 1 µs deadline`);
  expect([...problems, ...attackerProblems(outcome, ['deadline_exceeded', 'rate_limited'])]).toEqual([]);
}, 60000);
