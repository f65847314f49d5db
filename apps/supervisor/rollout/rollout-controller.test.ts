import { existsSync, mkdtempSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import pino from 'pino';
import { Registry } from 'prom-client';
import type { MetricJson } from '../../../libs/metrics';
import { DURATION_BUCKETS } from '../../../libs/metrics';
import type { TablePlan } from '../../../libs/registry';
import { type RolloutRecord, startRollout, validatePlan } from '../../../libs/rollout';
import { counterSample } from './counter-sample';
import { RolloutConflictError } from './errors';
import { RolloutController, type RolloutHost, type RolloutRouting } from './rollout-controller';
import { FileRolloutStore, type RolloutStore, type StoredRollout } from './rollout-store';

const logger = pino({ level: 'silent' });

function metric(name: string, type: string, values: MetricJson['values']): MetricJson {
  return { name, help: name, type, values, aggregator: 'sum' } as unknown as MetricJson;
}

/**
 * One node's metrics: `n` judged answers per version (`errors` of the candidate's failing), all under 0.5 ms;
 * beside them what a rollout must not count — the answers of every request (pinned ones, client faults) in
 * `streaminfer_requests_total` and their durations, and another model's judged answers.
 */
function nodeMetrics(
  stable: number,
  candidate: number,
  errors: number,
  agree: number,
  disagree: number,
): MetricJson[] {
  const labels = (version: string) => ({ model: 'digits', version });
  const buckets = (name: string, version: string, n: number) => [
    ...DURATION_BUCKETS.map((le) => ({
      metricName: `${name}_bucket`,
      value: n,
      labels: { ...labels(version), le },
    })),
    { metricName: `${name}_bucket`, value: n, labels: { ...labels(version), le: '+Inf' } },
  ];
  const judged = 'streaminfer_rollout_judged_duration_seconds';
  const all = 'streaminfer_request_duration_seconds';
  return [
    metric('streaminfer_rollout_judged_requests_total', 'counter', [
      { value: stable, labels: { ...labels('1'), result: 'ok' } },
      { value: 0, labels: { ...labels('1'), result: 'error' } },
      { value: candidate - errors, labels: { ...labels('2'), result: 'ok' } },
      { value: errors, labels: { ...labels('2'), result: 'error' } },
      { value: 5, labels: { model: 'other', version: '2', result: 'error' } },
    ]),
    metric(judged, 'histogram', [...buckets(judged, '1', stable), ...buckets(judged, '2', candidate)]),
    // pinned requests, deadlines too short, client faults: in the totals, never judged
    metric('streaminfer_requests_total', 'counter', [
      { value: 1000, labels: { ...labels('2'), protocol: 'ws', code: 'deadline_exceeded' } },
      { value: 1000, labels: { ...labels('1'), protocol: 'ws', code: 'deadline_exceeded' } },
      { value: 1000, labels: { ...labels('2'), protocol: 'ws', code: 'bad_request' } },
    ]),
    metric(all, 'histogram', [...buckets(all, '1', 5000), ...buckets(all, '2', 5000)]),
    metric('streaminfer_shadow_comparisons_total', 'counter', [
      { value: agree, labels: { model: 'digits', agree: 'true' } },
      { value: disagree, labels: { model: 'digits', agree: 'false' } },
      { value: 999, labels: { model: 'other', agree: 'false' } },
    ]),
    metric('streaminfer_shadow_candidate_errors_total', 'counter', [
      { value: 3, labels: { model: 'digits' } },
      { value: 7, labels: { model: 'other' } },
    ]),
  ];
}

test("counterSample sums the nodes' judged answers, leaves every other answer and other models out", () => {
  const sample = counterSample(
    [nodeMetrics(100, 20, 2, 90, 10), nodeMetrics(50, 10, 0, 45, 5)],
    'digits',
    '1',
    '2',
    7,
  );
  expect(sample.at).toBe(7);
  expect(sample.stable).toMatchObject({ requests: 150, errors: 0 });
  expect(sample.candidate).toMatchObject({ requests: 30, errors: 2 });
  expect(sample.candidate.latency).toHaveLength(DURATION_BUCKETS.length + 1);
  expect(sample.candidate.latency.every((count) => count === 30)).toBe(true);
  expect(sample.shadow).toEqual({ agree: 135, disagree: 15, candidateErrors: 6 });
});

/** A host whose counters grow by a fixed amount at every collection, and whose registry is a plain table. */
class FakeHost implements RolloutHost {
  table_: TablePlan = {
    defaultModel: 'digits',
    models: [{ name: 'digits', versions: ['1', '2'], stable: '1' }],
  };
  routes: RolloutRouting[] = [];
  private calls = 0;
  candidateErrorShare = 0;

  table(): TablePlan {
    return this.table_;
  }

  async collectMetrics(): Promise<MetricJson[][]> {
    this.calls++;
    const n = this.calls * 100;
    return [nodeMetrics(n * 5, n, Math.round(n * this.candidateErrorShare), n, 0)];
  }

  isClassifier(): boolean {
    return true;
  }

  /** Registry changes to refuse (another reload running) before they go through again. */
  failRoutes = 0;

  async route(model: string, routing: RolloutRouting): Promise<void> {
    if (this.failRoutes > 0) {
      this.failRoutes--;
      throw new Error('another reload is in progress');
    }
    this.routes.push(routing);
    const current = this.table_.models[0]!;
    this.table_ = {
      ...this.table_,
      models: [
        routing.kind === 'promote'
          ? {
              name: model,
              versions: current.versions,
              stable: routing.candidate,
              previousStable: current.stable,
            }
          : {
              ...current,
              candidate: routing.candidate,
              canaryPercent: routing.canaryPercent,
              shadow: routing.shadow,
            },
      ],
    };
  }
}

/** A shared store in memory, with compare-and-set like the fleet's KV. */
class MemoryStore implements RolloutStore {
  readonly shared = true;
  readonly entries = new Map<string, StoredRollout>();

  async list() {
    return { entries: [...this.entries.values()], warnings: [] };
  }

  async read(model: string) {
    return this.entries.get(model);
  }

  async write(
    record: RolloutRecord,
    driver: string,
    beatAt: number,
    settled: boolean,
    expected: number,
  ): Promise<number> {
    const current = this.entries.get(record.model)?.revision ?? 0;
    if (current !== expected) throw new RolloutConflictError(`at ${current}, not ${expected}`);
    this.entries.set(record.model, { record, driver, beatAt, settled, revision: current + 1 });
    return current + 1;
  }
}

/**
 * A MemoryStore whose next list() can be held: it reads the entries when it is called and answers only when
 * released, as a fleet host's scan does when NATS is slow (its keys listed, then each value read, while the
 * driver keeps writing).
 */
class SlowListStore extends MemoryStore {
  private hold: { gate: Promise<void>; open: () => void } | undefined;

  holdNextList(): () => void {
    let open = () => {};
    const gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    this.hold = { gate, open };
    return open;
  }

  override async list() {
    const listed = await super.list();
    const hold = this.hold;
    this.hold = undefined;
    if (hold) await hold.gate;
    return listed;
  }
}

const PLAN = {
  version: '2',
  steps: [10, 50],
  dwell_s: 0,
  min_requests: 1,
  interval_s: 0.1,
  min_samples: 10,
  checks: { error_rate: { max_increase: 0.05 }, disagreement: { max: 0.05 } },
};

async function until(check: () => boolean, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

type Viewed = { rollout: { state: string; step: number; share: number; reason: string | null } };

describe('RolloutController', () => {
  const controllers: RolloutController[] = [];
  afterEach(() => {
    for (const controller of controllers.splice(0)) controller.stop();
  });

  function controller(
    host: RolloutHost,
    store: RolloutStore,
    hostId = 'a',
    now?: () => number,
  ): RolloutController {
    const made = new RolloutController({
      host,
      store,
      registry: new Registry(),
      logger,
      hostId,
      scanMs: 50,
      ...(now ? { now } : {}),
    });
    controllers.push(made);
    return made;
  }

  test('single host: steps, promotes through the registry, persists to the state dir', async () => {
    const host = new FakeHost();
    const dir = mkdtempSync(path.join(os.tmpdir(), 'rollout-unit-'));
    const rollouts = controller(host, new FileRolloutStore(dir));
    await rollouts.resume();
    const started = (await rollouts.handle('digits', 'start', PLAN)) as Viewed;
    expect(started.rollout).toMatchObject({ state: 'progressing', step: 0, share: 10 });
    expect(rollouts.active('digits')).toBe(true);
    await until(() => host.table().models[0]!.stable === '2');
    expect(host.routes).toEqual([
      { kind: 'canary', candidate: '2', canaryPercent: 10, shadow: true },
      { kind: 'canary', candidate: '2', canaryPercent: 50, shadow: true },
      { kind: 'promote', candidate: '2' },
    ]);
    const file = JSON.parse(readFileSync(path.join(dir, 'rollouts.json'), 'utf8')) as {
      rollouts: { record: { state: string } }[];
    };
    expect(file.rollouts[0]!.record.state).toBe('promoted');
    expect(rollouts.active('digits')).toBe(false);
  });

  test('single host: a failing candidate rolls back (share 0, no mirroring, still the candidate)', async () => {
    const host = new FakeHost();
    host.candidateErrorShare = 0.5;
    const rollouts = controller(
      host,
      new FileRolloutStore(mkdtempSync(path.join(os.tmpdir(), 'rollout-unit-'))),
    );
    await rollouts.handle('digits', 'start', { ...PLAN, failures_to_rollback: 2 });
    await until(() => (host.routes.at(-1) as { canaryPercent?: number }).canaryPercent === 0);
    expect(host.routes.at(-1)).toEqual({ kind: 'canary', candidate: '2', canaryPercent: 0, shadow: false });
    expect(host.table().models[0]).toMatchObject({
      stable: '1',
      candidate: '2',
      canaryPercent: 0,
      shadow: false,
    });
    const view = (await rollouts.handle('digits', 'get', {})) as Viewed;
    expect(view.rollout.state).toBe('rolled_back');
    expect(view.rollout.reason).toMatch(/^error_rate failed 2 evaluations in a row/);
    // finished: pause is refused as a conflict; an unknown model is not_found
    await expect(rollouts.handle('digits', 'pause', {})).rejects.toMatchObject({ code: 'conflict' });
    await expect(rollouts.handle('nope', 'get', {})).rejects.toMatchObject({ code: 'not_found' });
    await expect(rollouts.handle('nope', 'start', PLAN)).rejects.toMatchObject({ code: 'not_found' });
    await expect(rollouts.handle('digits', 'start', { ...PLAN, steps: [] })).rejects.toMatchObject({
      code: 'bad_request',
    });
    await expect(rollouts.handle('digits', 'start', { ...PLAN, version: '1' })).rejects.toMatchObject({
      code: 'bad_request',
    });
  });

  test('a rollback whose registry change fails is tried again until it holds, also after a restart', async () => {
    const host = new FakeHost();
    host.candidateErrorShare = 0.5;
    const dir = mkdtempSync(path.join(os.tmpdir(), 'rollout-unit-'));
    const first = controller(host, new FileRolloutStore(dir));
    await first.handle('digits', 'start', { ...PLAN, failures_to_rollback: 1 });
    host.failRoutes = 1000;
    await until(() => !first.active('digits'));
    // rolled back, but the registry still serves the canary: persisted unsettled
    expect(host.table().models[0]).toMatchObject({ canaryPercent: 10 });
    const file = () =>
      (
        JSON.parse(readFileSync(path.join(dir, 'rollouts.json'), 'utf8')) as {
          rollouts: { settled: boolean }[];
        }
      ).rollouts[0]!;
    expect(file().settled).toBe(false);
    // a restart: the next supervisor settles it
    first.stop();
    host.failRoutes = 2;
    const second = controller(host, new FileRolloutStore(dir));
    await second.resume();
    await until(() => host.table().models[0]!.canaryPercent === 0);
    expect(host.table().models[0]).toMatchObject({ stable: '1', candidate: '2', shadow: false });
    await until(() => file().settled);
  });

  test('a start whose record cannot be saved (full disk) is refused and takes the candidate share back', async () => {
    const host = new FakeHost();
    const dir = mkdtempSync(path.join(os.tmpdir(), 'rollout-unit-'));
    symlinkSync('/dev/full', path.join(dir, `rollouts.json.${process.pid}.tmp`));
    const rollouts = controller(host, new FileRolloutStore(dir));
    await rollouts.resume();
    await expect(rollouts.handle('digits', 'start', PLAN)).rejects.toMatchObject({ code: 'storage_full' });
    expect(rollouts.active('digits')).toBe(false);
    // No rollout watches the candidate: it serves nothing.
    expect(host.table().models[0]).toMatchObject({
      stable: '1',
      candidate: '2',
      canaryPercent: 0,
      shadow: false,
    });
  });

  test('a fleet: one drives, the other follows, pauses it by CAS, and takes it over when the driver goes silent', async () => {
    const store = new MemoryStore();
    const host = new FakeHost();
    let skewMs = 0;
    const a = controller(host, store, 'a');
    const b = controller(host, store, 'b', () => Date.now() + skewMs);
    await a.resume();
    await b.resume();
    await a.handle('digits', 'start', { ...PLAN, steps: [10, 20, 30, 40, 50, 60, 70, 80, 90], dwell_s: 0.3 });
    await until(() => b.active('digits'));
    expect(store.entries.get('digits')!.driver).toBe('a');
    // an operator's pause on b: written by CAS, a keeps driving but holds the share
    const paused = (await b.handle('digits', 'pause', {})) as Viewed;
    expect(paused.rollout.state).toBe('paused');
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(store.entries.get('digits')!.record.state).toBe('paused');
    expect(store.entries.get('digits')!.driver).toBe('a');
    await b.handle('digits', 'resume', {});
    // a stops; b, whose clock says a has been silent for long, takes over and finishes
    a.stop();
    skewMs = 60_000;
    await until(() => store.entries.get('digits')!.driver === 'b');
    await until(() => store.entries.get('digits')!.record.state === 'promoted', 10000);
    expect(host.table().models[0]!.stable).toBe('2');
  });
});

describe('a finished rollout stays finished', () => {
  const controllers: RolloutController[] = [];
  afterEach(() => {
    for (const controller of controllers.splice(0)) controller.stop();
  });
  function controller(host: RolloutHost, store: RolloutStore, hostId = 'a'): RolloutController {
    const made = new RolloutController({ host, store, registry: new Registry(), logger, hostId, scanMs: 20 });
    controllers.push(made);
    return made;
  }
  /** Polls `check` for `ms`: it must hold at every look. */
  async function always(check: () => boolean, ms: number): Promise<void> {
    const deadline = Date.now() + ms;
    while (Date.now() < deadline) {
      expect(check()).toBe(true);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  }

  test('a fleet scan that listed the rollout before its promotion does not bring it back', async () => {
    const store = new SlowListStore();
    const host = new FakeHost();
    const a = controller(host, store);
    await a.resume();
    await a.handle('digits', 'start', { ...PLAN, steps: [10, 20, 50], dwell_s: 0.2 });
    await until(() => store.entries.get('digits')!.record.step === 1);
    // This scan reads the rollout at step 1, and answers once the promotion is written and settled.
    const release = store.holdNextList();
    await until(() => {
      const entry = store.entries.get('digits')!;
      return entry.record.state === 'promoted' && entry.settled;
    });
    expect(a.active('digits')).toBe(false);
    release();
    // Before the fix: the scan adopted the step-1 record, and version reloads answered 409 "a rollout of
    // "digits" is running" until the next scan.
    await always(() => !a.active('digits'), 200);
    expect(((await a.handle('digits', 'get', {})) as Viewed).rollout.state).toBe('promoted');
    expect(store.entries.get('digits')!.record.state).toBe('promoted');
  });

  test('single host: promoted, restarted on the same state dir, stable moved by hand: never active again', async () => {
    const host = new FakeHost();
    const dir = mkdtempSync(path.join(os.tmpdir(), 'rollout-unit-'));
    const first = controller(host, new FileRolloutStore(dir));
    await first.resume();
    await first.handle('digits', 'start', PLAN);
    await until(() => host.table().models[0]!.stable === '2');
    await until(
      () =>
        (
          JSON.parse(readFileSync(path.join(dir, 'rollouts.json'), 'utf8')) as {
            rollouts: { settled: boolean; record: { state: string } }[];
          }
        ).rollouts[0]!.settled,
    );
    first.stop();
    const routes = host.routes.length;
    const second = controller(host, new FileRolloutStore(dir));
    await second.resume();
    // Version reloads by hand: stable back to 1, to 2, to 1 (the candidate the rollout promoted is gone).
    for (const stable of ['1', '2', '1']) {
      host.table_ = { ...host.table_, models: [{ name: 'digits', versions: ['1', '2'], stable }] };
      await always(() => !second.active('digits'), 150);
    }
    expect(host.routes.length).toBe(routes);
    expect(host.table().models[0]!.stable).toBe('1');
  });
});

test('FileRolloutStore: a corrupt file is a warning, not a crash', async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'rollout-store-'));
  writeFileSync(path.join(dir, 'rollouts.json'), '{"format": 1, "rollouts": [{"record": {}}]}');
  const listed = await new FileRolloutStore(dir).list();
  expect(listed.entries).toEqual([]);
  expect(listed.warnings[0]).toMatch(/that rollout is skipped/);
  writeFileSync(path.join(dir, 'rollouts.json'), 'not json');
  expect((await new FileRolloutStore(dir).list()).warnings[0]).toMatch(/corrupt/);
});

test('FileRolloutStore: a write on a full disk throws storage_full, is counted, leaves no temporary file', async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'rollout-store-'));
  const failures: unknown[] = [];
  const store = new FileRolloutStore(dir, (error) => failures.push(error));
  const { record } = startRollout({
    model: 'digits',
    stable: '1',
    candidate: '2',
    plan: validatePlan(PLAN, { classifier: true }),
    now: 0,
  });
  // The kernel's full device at the temporary file's path: every write to it fails ENOSPC.
  symlinkSync('/dev/full', path.join(dir, `rollouts.json.${process.pid}.tmp`));
  await expect(store.write(record, 'local', 0, true, 0)).rejects.toMatchObject({ code: 'storage_full' });
  expect(failures).toHaveLength(1);
  expect(readdirSync(dir)).toEqual([]);
  expect((await store.list()).entries).toEqual([]);
  await store.write(record, 'local', 0, true, 0);
  expect(existsSync(path.join(dir, 'rollouts.json'))).toBe(true);
  expect((await store.list()).entries).toHaveLength(1);
});
