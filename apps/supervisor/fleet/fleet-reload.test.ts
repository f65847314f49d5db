import type { NodeSettings, TablePlan } from '../../../libs/registry';
import type { StepAnswer } from '../coordinator';
import { ReloadBusyError } from '../errors';
import type { FleetRecord, FleetTable, HostStepAnswer } from './';
import {
  type CommitPointResult,
  FleetReloadCoordinator,
  type FleetReloadRequest,
  type HostChannel,
  planHostCatchUp,
} from './fleet-reload';

const v1: FleetTable = {
  defaultModel: 'digits',
  models: [{ name: 'digits', versions: ['1', '2'], stable: '1' }],
};
const v2: FleetTable = {
  defaultModel: 'digits',
  models: [{ name: 'digits', versions: ['1', '2'], stable: '2' }],
};
const ok: StepAnswer = { ok: true };
const base: FleetReloadRequest['base'] = {
  record: {
    format: 1,
    epoch: 7,
    table: v1,
    reloadId: 'r0',
    reason: 'join',
    strategy: 'atomic',
    committedBy: 'b',
    committedAt: '2026-01-01T00:00:00.000Z',
  },
  revision: 40,
};
const T0 = Date.parse('2026-12-01T00:00:00.000Z');

type Step = 'prepare' | 'commit' | 'abort' | 'release' | 'roll';
type Script = Partial<Record<Step, () => Promise<StepAnswer>>>;

/** A fleet of fake hosts and a fake KV: every step and write lands in one log, in the order it happened. */
function fleet(
  hosts: Array<[string, Script?, (string | number)?]>,
  writes: Array<() => Promise<CommitPointResult>> = [],
) {
  const log: string[] = [];
  const ids = new Set<string>();
  const records: Array<{ record: FleetRecord; expectedRevision: number }> = [];
  const channel = (host: string, script: Script = {}, epoch?: number): HostChannel => {
    const answer = (step: Step, id: string, detail = '') => {
      log.push(`${host}:${step}${detail}`);
      ids.add(id);
      return script[step]?.() ?? Promise.resolve(ok);
    };
    return {
      host,
      ...(epoch !== undefined ? { epoch } : {}),
      prepare: (_plan, id) => answer('prepare', id),
      commit: (_plan, epoch, id) => answer('commit', id, `@${epoch}`),
      abort: (id) => answer('abort', id),
      release: (_plan, id) => answer('release', id),
      roll: (plan, epoch, id) => answer('roll', id, `@${epoch}:${plan.models[0]!.stable}`),
    };
  };
  // A third element: a number is the epoch the host's heartbeat says; a string, the member is down already
  // (no fresh heartbeat), with this reason.
  const channels = hosts.map(([host, script, extra]) =>
    typeof extra === 'number'
      ? channel(host, script, extra)
      : extra === undefined
        ? channel(host, script)
        : { ...channel(host, script), down: extra },
  );
  let clock = T0;
  let reloads = 0;
  const coordinator = new FleetReloadCoordinator({
    host: 'a',
    hosts: () => channels,
    commitPoint: async (record, expectedRevision) => {
      log.push(`record@${record.epoch}`);
      records.push({ record: structuredClone(record), expectedRevision });
      const scripted = writes.shift();
      return scripted ? scripted() : { ok: true, revision: expectedRevision + 1 };
    },
    now: () => (clock += 10),
    newId: () => `r${++reloads}`,
  });
  return { coordinator, log, ids, records };
}

function request(over: Partial<FleetReloadRequest> = {}): FleetReloadRequest {
  return { table: v2, strategy: 'atomic', reason: 'promote digits', base, ...over };
}

/** Answers from a list, one per call (the last one repeats). */
function answers(...list: StepAnswer[]): () => Promise<StepAnswer> {
  let call = 0;
  return async () => list[Math.min(call++, list.length - 1)]!;
}

const fail = (error: string) => async (): Promise<StepAnswer> => ({ ok: false, error });

describe('atomic fleet reload (epoch barrier across hosts)', () => {
  test('prepare on every host, write the record at the next epoch, commit everywhere, release', async () => {
    const { coordinator, log, ids, records } = fleet([['a'], ['b'], ['c']]);
    // A host's own plan carries its node settings; the fleet table never does.
    const withSettings: TablePlan = { ...v2, settings: { logLevel: 'debug' } as NodeSettings };
    const outcome = await coordinator.reload(request({ table: withSettings }));
    expect(log).toEqual([
      'a:prepare',
      'b:prepare',
      'c:prepare',
      'record@8',
      'a:commit@8',
      'b:commit@8',
      'c:commit@8',
      'a:release',
      'b:release',
      'c:release',
    ]);
    expect(records).toEqual([
      {
        expectedRevision: 40,
        record: {
          // A format-1 base (no members yet): the record written names the hosts asked.
          format: 2,
          epoch: 8,
          members: ['a', 'b', 'c'],
          table: v2,
          reloadId: 'r1',
          reason: 'promote digits',
          strategy: 'atomic',
          committedBy: 'a',
          committedAt: new Date(T0 + 20).toISOString(),
        },
      },
    ]);
    expect([...ids]).toEqual(['r1']);
    expect(outcome).toEqual({
      id: 'r1',
      result: 'committed',
      strategy: 'atomic',
      reason: 'promote digits',
      epochBefore: 7,
      epoch: 8,
      revision: 41,
      changes: [{ model: 'digits', from: '1', to: '2' }],
      startedAt: new Date(T0 + 10).toISOString(),
      durationMs: 20,
      hosts: [
        { host: 'a', state: 'committed' },
        { host: 'b', state: 'committed' },
        { host: 'c', state: 'committed' },
      ],
    });
    expect(coordinator.last).toBe(outcome);
  });

  test('one host failing PREPARE aborts every host; the record is never written', async () => {
    const { coordinator, log, records } = fleet([
      ['a'],
      ['b', { prepare: fail('invalid model file') }],
      ['c'],
    ]);
    const outcome = await coordinator.reload(request());
    expect(outcome).toMatchObject({ result: 'failed', epochBefore: 7, epoch: 7 });
    expect(outcome.revision).toBeUndefined();
    expect(outcome.error).toBe('prepare failed, nothing changed: host b: invalid model file');
    expect(records).toEqual([]);
    expect(log.slice(3)).toEqual(['a:abort', 'b:abort', 'c:abort']);
    expect(outcome.hosts).toEqual([
      { host: 'a', state: 'unchanged' },
      { host: 'b', state: 'unchanged', error: 'prepare: invalid model file' },
      { host: 'c', state: 'unchanged' },
    ]);
  });

  test('a PREPARE timeout is a failure; a host that does not confirm the abort is a warning', async () => {
    const { coordinator, log, records } = fleet([
      ['a'],
      ['b'],
      ['c', { prepare: fail('timeout'), abort: fail('timeout') }],
    ]);
    const outcome = await coordinator.reload(request());
    expect(outcome).toMatchObject({ result: 'failed', epoch: 7 });
    expect(outcome.error).toContain('host c: timeout');
    expect(records).toEqual([]);
    expect(log).toEqual(expect.arrayContaining(['a:abort', 'b:abort', 'c:abort']));
    expect(log.some((entry) => entry.includes('commit'))).toBe(false);
    expect(outcome.warnings).toEqual(['host c did not confirm the abort: timeout']);
    expect(outcome.hosts[2]).toEqual({
      host: 'c',
      state: 'unchanged',
      error: 'prepare: timeout; abort: timeout',
    });
  });

  test('a host channel that throws counts as a failed step, never as a crash', async () => {
    const { coordinator, records } = fleet([
      ['a'],
      ['b', { prepare: () => Promise.reject(new Error('socket closed')) }],
    ]);
    const outcome = await coordinator.reload(request());
    expect(outcome.error).toContain('host b: socket closed');
    expect(records).toEqual([]);
    expect(coordinator.busy).toBe(false);
  });

  test('a CAS conflict at the commit point aborts every host: result conflict', async () => {
    const { coordinator, log, records } = fleet(
      [['a'], ['b']],
      [async () => ({ ok: false, conflict: true, error: 'wrong last sequence: 41' })],
    );
    const outcome = await coordinator.reload(request());
    expect(outcome).toMatchObject({ result: 'conflict', epoch: 7 });
    expect(outcome.error).toContain('changed since revision 40 (wrong last sequence: 41)');
    expect(records).toHaveLength(1);
    expect(log).toEqual(['a:prepare', 'b:prepare', 'record@8', 'a:abort', 'b:abort']);
    expect(outcome.hosts.map((host) => host.state)).toEqual(['unchanged', 'unchanged']);
  });

  test.each([
    [
      'answers unavailable',
      async (): Promise<CommitPointResult> => ({ ok: false, conflict: false, error: 'cluster_unavailable' }),
    ],
    ['throws', () => Promise.reject(new Error('cluster_unavailable'))],
  ])('a commit point that %s aborts every host: result failed', async (_how, write) => {
    const { coordinator, log } = fleet([['a'], ['b']], [write]);
    const outcome = await coordinator.reload(request());
    expect(outcome).toMatchObject({ result: 'failed', epoch: 7 });
    expect(outcome.error).toBe('the commit point failed, every host aborted: cluster_unavailable');
    expect(log).toEqual(['a:prepare', 'b:prepare', 'record@8', 'a:abort', 'b:abort']);
    expect(outcome.warnings?.[0]).toContain('converges to it');
  });

  test('a host missing COMMIT is fenced; the others commit and release; the reload stands', async () => {
    const { coordinator, log, records } = fleet([
      ['a'],
      ['b', { commit: fail('no answer') }],
      ['c', { release: fail('no answer') }],
    ]);
    const outcome = await coordinator.reload(request());
    expect(outcome).toMatchObject({ result: 'committed', epoch: 8, revision: 41 });
    expect(records).toHaveLength(1);
    expect(outcome.hosts).toEqual([
      { host: 'a', state: 'committed' },
      { host: 'b', state: 'fenced', error: 'commit: no answer' },
      { host: 'c', state: 'committed' },
    ]);
    expect(log).toContain('a:release');
    expect(log).toContain('c:release');
    expect(log).not.toContain('b:release');
    expect(log).not.toContain('b:abort');
    expect(outcome.warnings).toEqual([
      'host c did not confirm the release: no answer',
      'host b missed the commit: fenced until caught up from the record at epoch 8',
    ]);
  });

  test('a second reload while one runs is refused, never interleaved', async () => {
    let releasePrepare!: () => void;
    const slow = new Promise<StepAnswer>((resolve) => {
      releasePrepare = () => resolve(ok);
    });
    const { coordinator, records } = fleet([['a', { prepare: () => slow }]]);
    const first = coordinator.reload(request({ reason: 'first' }));
    expect(coordinator.busy).toBe(true);
    expect(coordinator.current).toEqual({ id: 'r1', reason: 'first' });
    await expect(coordinator.reload(request({ reason: 'second' }))).rejects.toBeInstanceOf(ReloadBusyError);
    await expect(coordinator.reload(request({ reason: 'second' }))).rejects.toThrow('reload 1 (first)');
    releasePrepare();
    expect((await first).result).toBe('committed');
    expect(coordinator.busy).toBe(false);
    expect(records).toHaveLength(1);
    const next = await coordinator.reload(
      request({ base: { record: records[0]!.record, revision: 41 }, table: v1 }),
    );
    expect(next).toMatchObject({ id: 'r2', result: 'committed', epoch: 9 });
  });

  test('a table equal to the record is unchanged: no host, no write', async () => {
    const { coordinator, log, records } = fleet([['a'], ['b']]);
    // Another object, with an undefined field and node settings: still the record's table.
    const same: TablePlan = {
      defaultModel: 'digits',
      models: [{ name: 'digits', versions: ['1', '2'], stable: '1', candidate: undefined }],
      settings: { logLevel: 'info' } as NodeSettings,
    };
    for (const strategy of ['atomic', 'rolling'] as const) {
      const outcome = await coordinator.reload(request({ table: same, strategy }));
      expect(outcome).toMatchObject({ result: 'unchanged', epoch: 7, changes: [], hosts: [] });
    }
    expect(log).toEqual([]);
    expect(records).toEqual([]);
  });

  test('force runs the barrier on an equal table (a host-local settings change), under the caller-made id', async () => {
    const { coordinator, log, records, ids } = fleet([['a'], ['b']]);
    const outcome = await coordinator.reload(request({ table: v1, force: true, id: 'mine' }));
    expect(outcome).toMatchObject({ id: 'mine', result: 'committed', epoch: 8, changes: [] });
    expect(log).toEqual([
      'a:prepare',
      'b:prepare',
      'record@8',
      'a:commit@8',
      'b:commit@8',
      'a:release',
      'b:release',
    ]);
    expect(records[0]!.record).toMatchObject({ reloadId: 'mine', epoch: 8, table: v1, strategy: 'atomic' });
    expect([...ids]).toEqual(['mine']);
  });
});

describe('the fleet epoch never goes backwards (a lost bucket, a re-founded fleet)', () => {
  test('a host ahead of the record (its PREPARE says so): the reload commits at max(known epochs) + 1', async () => {
    const { coordinator, log } = fleet([
      ['a'],
      ['b', { prepare: async () => ({ ok: true, data: { host: 'b', epoch: 12 } }) }],
    ]);
    const outcome = await coordinator.reload(request());
    expect(log).toEqual([
      'a:prepare',
      'b:prepare',
      'record@13',
      'a:commit@13',
      'b:commit@13',
      'a:release',
      'b:release',
    ]);
    expect(outcome).toMatchObject({ result: 'committed', epochBefore: 7, epoch: 13 });
  });

  test('a host ahead by its heartbeat counts too', async () => {
    const { coordinator, log } = fleet([['a'], ['b', {}, 20]]);
    expect((await coordinator.reload(request())).epoch).toBe(21);
    expect(log).toContain('record@21');
  });

  test('rolling: the record is written above every host it knows of', async () => {
    const { coordinator, log } = fleet([['a', {}, 15], ['b']]);
    const outcome = await coordinator.reload(request({ strategy: 'rolling' }));
    expect(log).toEqual(['record@16', 'a:roll@16:2', 'b:roll@16:2']);
    expect(outcome.epoch).toBe(16);
  });
});

describe('rolling fleet reload', () => {
  test('the record first, then host by host', async () => {
    const { coordinator, log, records } = fleet([['a'], ['b'], ['c']]);
    const outcome = await coordinator.reload(request({ strategy: 'rolling' }));
    expect(log).toEqual(['record@8', 'a:roll@8:2', 'b:roll@8:2', 'c:roll@8:2']);
    expect(records[0]).toMatchObject({
      expectedRevision: 40,
      record: { epoch: 8, table: v2, reloadId: 'r1' },
    });
    expect(outcome).toMatchObject({ result: 'committed', epoch: 8, revision: 41 });
    expect(outcome.hosts.map((host) => host.state)).toEqual(['rolled', 'rolled', 'rolled']);
  });

  test('a failure on the 2nd of 3 hosts writes the previous table at epoch+2 and rolls every host back', async () => {
    const { coordinator, log, records } = fleet([
      ['a'],
      ['b', { roll: answers({ ok: false, error: 'out of memory' }, ok) }],
      ['c'],
    ]);
    const outcome = await coordinator.reload(request({ strategy: 'rolling' }));
    // The failing host first, then the rolled ones in reverse, then the untouched one only moves epoch.
    expect(log).toEqual([
      'record@8',
      'a:roll@8:2',
      'b:roll@8:2',
      'record@9',
      'b:roll@9:1',
      'a:roll@9:1',
      'c:roll@9:1',
    ]);
    expect(records).toHaveLength(2);
    expect(records[1]).toEqual({
      expectedRevision: 41,
      record: {
        format: 2,
        epoch: 9,
        members: ['a', 'b', 'c'],
        table: v1,
        reloadId: 'r1',
        reason: 'promote digits (rolled back: host b failed)',
        strategy: 'rolling',
        committedBy: 'a',
        committedAt: expect.any(String),
      },
    });
    expect(outcome).toMatchObject({ result: 'failed', epochBefore: 7, epoch: 9, revision: 42 });
    expect(outcome.error).toBe(
      'rolling reload failed on host b: out of memory; back to the previous table at epoch 9: ' +
        'host a rolled back, host b rolled back, host c unchanged',
    );
    expect(outcome.hosts).toEqual([
      { host: 'a', state: 'rolled_back' },
      { host: 'b', state: 'rolled_back', error: 'roll: out of memory' },
      { host: 'c', state: 'unchanged' },
    ]);
    expect(outcome.warnings).toBeUndefined();
  });

  test('the rolled hosts go back in reverse order', async () => {
    const { coordinator, log } = fleet([['a'], ['b'], ['c', { roll: fail('out of memory') }], ['d']]);
    await coordinator.reload(request({ strategy: 'rolling' }));
    expect(log.slice(log.indexOf('record@9'))).toEqual([
      'record@9',
      'c:roll@9:1',
      'b:roll@9:1',
      'a:roll@9:1',
      'd:roll@9:1',
    ]);
  });

  test('a host that cannot be reached for the roll-back is fenced', async () => {
    const { coordinator } = fleet([
      ['a', { roll: answers(ok, { ok: false, error: 'timeout' }) }],
      ['b', { roll: fail('bad file') }],
    ]);
    const outcome = await coordinator.reload(request({ strategy: 'rolling' }));
    expect(outcome).toMatchObject({ result: 'failed', epoch: 9 });
    expect(outcome.hosts).toEqual([
      { host: 'a', state: 'fenced', error: 'roll back: timeout' },
      { host: 'b', state: 'fenced', error: 'roll: bad file; roll back: bad file' },
    ]);
    expect(outcome.warnings).toEqual([
      'host b did not return to the previous table (bad file): fenced until caught up from the record at epoch 9',
      'host a did not return to the previous table (timeout): fenced until caught up from the record at epoch 9',
    ]);
  });

  test('when the previous table cannot be written back, the record keeps the new table and no host moves back', async () => {
    const { coordinator, log } = fleet(
      [['a'], ['b', { roll: fail('out of memory') }], ['c']],
      [
        async () => ({ ok: true, revision: 41 }),
        async () => ({ ok: false, conflict: false, error: 'timeout' }),
      ],
    );
    const outcome = await coordinator.reload(request({ strategy: 'rolling' }));
    expect(log).toEqual(['record@8', 'a:roll@8:2', 'b:roll@8:2', 'record@9']);
    expect(outcome).toMatchObject({ result: 'failed', epoch: 8, revision: 41 });
    expect(outcome.error).toContain('the previous table could not be written back: timeout');
    expect(outcome.hosts).toEqual([
      { host: 'a', state: 'rolled' },
      { host: 'b', state: 'fenced', error: 'roll: out of memory' },
      { host: 'c', state: 'unchanged' },
    ]);
  });

  test('a conflict at the first write touches no host', async () => {
    const { coordinator, log } = fleet(
      [['a'], ['b']],
      [async () => ({ ok: false, conflict: true, error: 'wrong last sequence' })],
    );
    const outcome = await coordinator.reload(request({ strategy: 'rolling' }));
    expect(log).toEqual(['record@8']);
    expect(outcome).toMatchObject({ result: 'conflict', epoch: 7 });
    expect(outcome.hosts.map((host) => host.state)).toEqual(['unchanged', 'unchanged']);
  });
});

describe('planHostCatchUp (a host sees the registry record)', () => {
  test.each([
    ['same epoch, nothing in doubt', { epoch: 8 }, { epoch: 8, reloadId: 'r1' }, 'none'],
    [
      'same epoch, the prepared reload already committed',
      { epoch: 8, reloadInDoubt: 'r1' },
      { epoch: 8, reloadId: 'r1' },
      'none',
    ],
    [
      'the record took the prepared reload',
      { epoch: 7, reloadInDoubt: 'r1' },
      { epoch: 8, reloadId: 'r1' },
      'commit-prepared',
    ],
    ['a newer record, nothing in doubt', { epoch: 7 }, { epoch: 8, reloadId: 'r1' }, 'converge'],
    [
      'a newer record from another reload',
      { epoch: 7, reloadInDoubt: 'r2' },
      { epoch: 9, reloadId: 'r3' },
      'converge',
    ],
    ['a host far behind', { epoch: 2 }, { epoch: 8, reloadId: 'r1' }, 'converge'],
    // The record went back (bucket lost, fleet re-founded): the host raises it above its own epoch.
    ['a record below the host', { epoch: 5 }, { epoch: 0, reloadId: 'founded' }, 'raise'],
    [
      'prepared, the record not written yet',
      { epoch: 7, reloadInDoubt: 'r2' },
      { epoch: 7, reloadId: 'r1' },
      'fenced-wait',
    ],
  ] as const)('%s', (_case, own, record, expected) => {
    expect(planHostCatchUp(own, record)).toBe(expected);
  });
});

describe('membership: a member that is gone does not hold a change', () => {
  const members = { ...base, record: { ...base.record, format: 2 as const, members: ['a', 'b', 'c', 'd'] } };
  const gone: HostStepAnswer = {
    ok: false,
    down: true,
    error: 'host c is not connected to NATS (no responders on its step subject)',
  };

  test('a member marked down is never asked; one gone at PREPARE is dropped; the record keeps every member', async () => {
    // d has no fresh heartbeat: the host list marks it down.
    const { coordinator, log, records } = fleet([
      ['a'],
      ['b'],
      ['c', { prepare: async () => gone }],
      ['d', {}, 'no heartbeat within 10000 ms'],
    ]);
    const outcome = await coordinator.reload(request({ base: members }));
    expect(outcome.result).toBe('committed');
    // c answered no responder: no ABORT, COMMIT or RELEASE is sent to it; d is never asked at all.
    expect(log).toEqual([
      'a:prepare',
      'b:prepare',
      'c:prepare',
      'record@8',
      'a:commit@8',
      'b:commit@8',
      'a:release',
      'b:release',
    ]);
    expect(outcome.hosts).toEqual([
      { host: 'a', state: 'committed' },
      { host: 'b', state: 'committed' },
      { host: 'c', state: 'down', error: `prepare: ${gone.error}` },
      { host: 'd', state: 'down', error: 'no heartbeat within 10000 ms' },
    ]);
    expect(records[0]!.record.members).toEqual(['a', 'b', 'c', 'd']);
  });

  test('a format-1 base: the record written names the members that took part, not a gone one', async () => {
    const { coordinator, records } = fleet([['a'], ['ghost', { prepare: async () => gone }]]);
    const outcome = await coordinator.reload(request());
    expect(outcome.result).toBe('committed');
    expect(records[0]!.record).toMatchObject({ format: 2, members: ['a'] });
  });

  test('a refusal is not a departure: a member that answers no still aborts the change everywhere', async () => {
    const { coordinator, log } = fleet([
      ['a'],
      ['b', { prepare: fail('a reload is in progress on this host') }],
    ]);
    const outcome = await coordinator.reload(request({ base: members }));
    expect(outcome.result).toBe('failed');
    expect(log).toEqual(['a:prepare', 'b:prepare', 'a:abort', 'b:abort']);
  });

  test('a member gone at COMMIT is listed down, not fenced', async () => {
    const { coordinator } = fleet([['a'], ['b', { commit: async () => gone }]]);
    const outcome = await coordinator.reload(request({ base: members }));
    expect(outcome.result).toBe('committed');
    expect(outcome.hosts).toEqual([
      { host: 'a', state: 'committed' },
      { host: 'b', state: 'down', error: `commit: ${gone.error}` },
    ]);
    expect(outcome.warnings).toBeUndefined();
  });

  test('rolling: a member gone at its turn is skipped (it catches up from the record), not rolled back', async () => {
    const { coordinator, log, records } = fleet([['a'], ['b', { roll: async () => gone }], ['c']]);
    const outcome = await coordinator.reload(request({ base: members, strategy: 'rolling' }));
    expect(outcome.result).toBe('committed');
    expect(log).toEqual(['record@8', 'a:roll@8:2', 'b:roll@8:2', 'c:roll@8:2']);
    expect(records).toHaveLength(1);
    expect(outcome.hosts).toEqual([
      { host: 'a', state: 'rolled' },
      { host: 'b', state: 'down', error: `roll: ${gone.error}` },
      { host: 'c', state: 'rolled' },
    ]);
  });
});
