import type { TablePlan } from '../node/ipc';
import type { NodeChannel, StepAnswer } from './coordinator';
import { diffTables, ReloadBusyError, ReloadCoordinator } from './coordinator';

const v1: TablePlan = {
  defaultModel: 'digits',
  models: [{ name: 'digits', versions: ['1', '2'], stable: '1' }],
};
const v2: TablePlan = {
  defaultModel: 'digits',
  models: [{ name: 'digits', versions: ['1', '2'], stable: '2' }],
};
const ok: StepAnswer = { ok: true };

type Step = 'prepare' | 'commit' | 'abort' | 'release' | 'roll';

/** A node that records every step and answers from a script. */
function fakeNode(
  index: number,
  script: Partial<Record<Step, () => Promise<StepAnswer>>> = {},
  log: string[] = [],
): NodeChannel {
  const answer = (step: Step, detail = '') => {
    log.push(`${index}:${step}${detail}`);
    return script[step]?.() ?? Promise.resolve(ok);
  };
  return {
    index,
    prepare: () => answer('prepare'),
    commit: (_plan, epoch) => answer('commit', `@${epoch}`),
    abort: () => answer('abort'),
    release: () => answer('release'),
    roll: (plan, epoch) => answer('roll', `@${epoch}:${plan.models[0]!.stable}`),
  };
}

function coordinator(nodes: NodeChannel[]) {
  let clock = 0;
  return new ReloadCoordinator(v1, { nodes: () => nodes, now: () => (clock += 10) });
}

describe('atomic reload (epoch barrier)', () => {
  test('prepare everywhere, then commit the next epoch everywhere, then release', async () => {
    const log: string[] = [];
    const c = coordinator([fakeNode(0, {}, log), fakeNode(1, {}, log)]);
    const outcome = await c.reload(v2, 'atomic', 'test');
    expect(outcome).toMatchObject({
      result: 'committed',
      epochBefore: 0,
      epoch: 1,
      changes: [{ model: 'digits', from: '1', to: '2' }],
    });
    expect(log).toEqual(['0:prepare', '1:prepare', '0:commit@1', '1:commit@1', '0:release', '1:release']);
    expect(c.table).toBe(v2);
    expect(c.last).toBe(outcome);
  });

  test('a worker failing to load on one node aborts everywhere; the epoch does not move', async () => {
    const log: string[] = [];
    const c = coordinator([
      fakeNode(0, {}, log),
      fakeNode(1, { prepare: async () => ({ ok: false, error: 'invalid model file' }) }, log),
    ]);
    const outcome = await c.reload(v2, 'atomic', 'test');
    expect(outcome.result).toBe('failed');
    expect(outcome.error).toContain('node 1: invalid model file');
    expect(outcome.epoch).toBe(0);
    expect(log.filter((entry) => entry.includes('commit'))).toEqual([]);
    expect(log).toEqual(expect.arrayContaining(['0:abort', '1:abort']));
    expect(c.table).toBe(v1);
  });

  test('a node that dies or times out during prepare counts as a failure', async () => {
    const c = coordinator([
      fakeNode(0, { prepare: async () => ({ ok: false, error: 'no answer (the node died or timed out)' }) }),
      fakeNode(1),
    ]);
    const outcome = await c.reload(v2, 'atomic', 'test');
    expect(outcome).toMatchObject({ result: 'failed', epoch: 0 });
    expect(outcome.error).toContain('no answer');
  });

  test('a node missing the commit (died) does not undo it: it restarts on the new table', async () => {
    const c = coordinator([
      fakeNode(0),
      fakeNode(1, { commit: async () => ({ ok: false, error: 'no answer' }) }),
    ]);
    const outcome = await c.reload(v2, 'atomic', 'test');
    expect(outcome).toMatchObject({ result: 'committed', epoch: 1 });
    expect(outcome.warnings?.[0]).toContain('node 1 missed the commit');
    expect(c.table).toBe(v2);
  });

  test('a second reload while one runs is refused, never interleaved', async () => {
    let releasePrepare!: () => void;
    const slow = new Promise<StepAnswer>((resolve) => {
      releasePrepare = () => resolve(ok);
    });
    const c = coordinator([fakeNode(0, { prepare: () => slow })]);
    const first = c.reload(v2, 'atomic', 'first');
    expect(c.busy).toBe(true);
    await expect(c.reload(v1, 'atomic', 'second')).rejects.toBeInstanceOf(ReloadBusyError);
    releasePrepare();
    expect((await first).result).toBe('committed');
    expect(c.busy).toBe(false);
    expect((await c.reload(v1, 'atomic', 'third')).epoch).toBe(2);
  });
});

describe('rolling reload', () => {
  test('node by node, in order', async () => {
    const log: string[] = [];
    const c = coordinator([fakeNode(0, {}, log), fakeNode(1, {}, log), fakeNode(2, {}, log)]);
    const outcome = await c.reload(v2, 'rolling', 'test');
    expect(outcome).toMatchObject({ result: 'committed', epoch: 1 });
    expect(log).toEqual(['0:roll@1:2', '1:roll@1:2', '2:roll@1:2']);
  });

  test('a failure rolls the nodes already done back to the previous table, in reverse', async () => {
    const log: string[] = [];
    const nodes = [
      fakeNode(0, {}, log),
      fakeNode(1, {}, log),
      fakeNode(2, { roll: async () => ({ ok: false, error: 'out of memory' }) }, log),
    ];
    const c = coordinator(nodes);
    const outcome = await c.reload(v2, 'rolling', 'test');
    expect(outcome).toMatchObject({ result: 'failed' });
    expect(outcome.error).toContain('node 2');
    // Epochs only grow: the way back is epoch 2, serving the previous table.
    expect(log).toEqual(['0:roll@1:2', '1:roll@1:2', '2:roll@1:2', '1:roll@2:1', '0:roll@2:1']);
    expect(c.table).toBe(v1);
    expect(c.epoch).toBe(2);
  });
});

test('diffTables reports stable changes, new and removed models', () => {
  expect(
    diffTables(
      {
        defaultModel: 'a',
        models: [
          { name: 'a', versions: ['1'], stable: '1' },
          { name: 'gone', versions: ['1'], stable: '1' },
        ],
      },
      {
        defaultModel: 'a',
        models: [
          { name: 'a', versions: ['1', '2'], stable: '2' },
          { name: 'new', versions: ['3'], stable: '3' },
        ],
      },
    ),
  ).toEqual([
    { model: 'a', from: '1', to: '2' },
    { model: 'new', from: null, to: '3' },
    { model: 'gone', from: '1', to: null },
  ]);
});
