import { ProtocolError } from '../../libs/protocol';
import type { TablePlan } from '../../libs/registry';
import type { NodeChannel, StepAnswer } from './coordinator';
import { diffTables, ReloadCoordinator } from './coordinator';
import { ReloadBusyError } from './errors';

const v1: TablePlan = {
  defaultModel: 'digits',
  models: [{ name: 'digits', versions: ['1', '2'], stable: '1' }],
};
const v2: TablePlan = {
  defaultModel: 'digits',
  models: [{ name: 'digits', versions: ['1', '2'], stable: '2' }],
};
const ok: StepAnswer = { ok: true };

type Step = 'prepare' | 'commit' | 'abort' | 'release' | 'roll' | 'restart';

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
    restart: () => answer('restart'),
  };
}

/** Answers from a list, one per call (the last one repeats). */
function answers(...list: StepAnswer[]): () => Promise<StepAnswer> {
  let call = 0;
  return async () => list[Math.min(call++, list.length - 1)]!;
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
    expect(outcome.nodes).toEqual([
      { node: 0, state: 'committed' },
      { node: 1, state: 'committed' },
    ]);
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
    expect(outcome.nodes).toEqual([
      { node: 0, state: 'unchanged' },
      { node: 1, state: 'unchanged' },
    ]);
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

  test('a node missing the commit does not undo it: it is restarted onto the new table', async () => {
    const log: string[] = [];
    let epochAtRestart = -1;
    let tableAtRestart: TablePlan | undefined;
    const nodes = [
      fakeNode(0, {}, log),
      fakeNode(
        1,
        {
          commit: async () => ({ ok: false, error: 'no answer' }),
          restart: async () => {
            epochAtRestart = c.epoch;
            tableAtRestart = c.table;
            return ok;
          },
        },
        log,
      ),
    ];
    const c = coordinator(nodes);
    const outcome = await c.reload(v2, 'atomic', 'test');
    expect(outcome).toMatchObject({ result: 'committed', epoch: 1 });
    expect(outcome.warnings?.[0]).toContain(
      'node 1 missed the commit (commit: no answer); restarted onto epoch 1',
    );
    expect(outcome.nodes).toEqual([
      { node: 0, state: 'committed' },
      { node: 1, state: 'restarted', error: 'commit: no answer' },
    ]);
    // The restart comes up on the committed table: the host had moved before it was asked for.
    expect(epochAtRestart).toBe(1);
    expect(tableAtRestart).toBe(v2);
    expect(log).toContain('1:restart');
    expect(log).not.toContain('1:release');
    expect(c.table).toBe(v2);
  });

  test('a restart that fails too is reported as such', async () => {
    const c = coordinator([
      fakeNode(0, {
        commit: async () => ({ ok: false, error: 'no answer' }),
        restart: async () => ({ ok: false, error: 'node 0 did not become ready' }),
      }),
    ]);
    const outcome = await c.reload(v2, 'atomic', 'test');
    expect(outcome.nodes).toEqual([
      {
        node: 0,
        state: 'restart_failed',
        error: 'commit: no answer; restart: node 0 did not become ready',
      },
    ]);
    expect(outcome.warnings?.[0]).toContain('its restart failed');
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

describe('a fleet reload held between PREPARE and the fleet’s decision', () => {
  test('prepareHeld prepares every node and holds; commitHeld commits the fleet’s epoch, then releases', async () => {
    const log: string[] = [];
    const outcomes: string[] = [];
    const c = new ReloadCoordinator(v1, {
      nodes: () => [fakeNode(0, {}, log), fakeNode(1, {}, log)],
      now: () => 0,
      onOutcome: (outcome) => outcomes.push(`${outcome.result}@${outcome.epoch}`),
    });
    expect(await c.prepareHeld(v2, 'fleet reload r1')).toEqual({ ok: true });
    expect(log).toEqual(['0:prepare', '1:prepare']);
    // Held: the host's own reloads wait, nothing is decided yet.
    expect(c.busy).toBe(true);
    expect(c.heldReason).toBe('fleet reload r1');
    await expect(c.reload(v1, 'atomic', 'local')).rejects.toBeInstanceOf(ReloadBusyError);
    expect(outcomes).toEqual([]);
    const outcome = await c.commitHeld(5);
    expect(outcome).toMatchObject({
      result: 'committed',
      epochBefore: 0,
      epoch: 5,
      reason: 'fleet reload r1',
    });
    expect(log.slice(2)).toEqual(['0:commit@5', '1:commit@5', '0:release', '1:release']);
    expect(c.table).toBe(v2);
    expect(c.busy).toBe(false);
    expect(outcomes).toEqual(['committed@5']);
  });

  test('abortHeld drops what every node prepared; the epoch and table stay', async () => {
    const log: string[] = [];
    const c = coordinator([fakeNode(0, {}, log), fakeNode(1, {}, log)]);
    await c.prepareHeld(v2, 'fleet reload r2');
    const outcome = await c.abortHeld('the fleet aborted the reload');
    expect(outcome).toMatchObject({ result: 'failed', epoch: 0, error: 'the fleet aborted the reload' });
    expect(log).toEqual(['0:prepare', '1:prepare', '0:abort', '1:abort']);
    expect(c.table).toBe(v1);
    expect(c.busy).toBe(false);
    await expect(c.commitHeld(1)).rejects.toThrow('no prepared reload');
  });

  test('a failed PREPARE settles at once: every node aborts and nothing is held', async () => {
    const log: string[] = [];
    const c = coordinator([
      fakeNode(0, {}, log),
      fakeNode(1, { prepare: answers({ ok: false, error: 'bad file' }) }, log),
    ]);
    expect(await c.prepareHeld(v2, 'fleet reload r3')).toEqual({
      ok: false,
      error: 'prepare failed, nothing changed: node 1: bad file',
    });
    expect(log).toEqual(['0:prepare', '1:prepare', '0:abort', '1:abort']);
    expect(c.busy).toBe(false);
    expect(c.last).toMatchObject({ result: 'failed', epoch: 0 });
  });

  test('a reload to the fleet’s epoch: the epoch given, never one at or below the host’s', async () => {
    const log: string[] = [];
    const c = coordinator([fakeNode(0, {}, log)]);
    expect((await c.reload(v2, 'atomic', 'caught up', 7)).epoch).toBe(7);
    expect(log).toEqual(['0:prepare', '0:commit@7', '0:release']);
    await expect(c.reload(v1, 'atomic', 'behind', 7)).rejects.toThrow('not above');
  });

  test('a COMMIT at or below the host’s epoch settles the held reload: aborted, never left busy', async () => {
    const log: string[] = [];
    const c = coordinator([fakeNode(0, {}, log)]);
    await c.reload(v2, 'atomic', 'caught up', 7);
    await c.prepareHeld(v1, 'fleet reload r4');
    // A fleet whose record went back (a lost bucket, a re-founded fleet) commits below this host.
    await expect(c.commitHeld(6)).rejects.toThrow('not above');
    expect(c.busy).toBe(false);
    expect(c.heldReason).toBeUndefined();
    expect(log.slice(-2)).toEqual(['0:prepare', '0:abort']);
    expect(c.last).toMatchObject({ result: 'failed', epoch: 7, reason: 'fleet reload r4' });
    expect(c.table).toBe(v2);
    // The next fleet reload is taken, not refused as "in progress".
    expect(await c.prepareHeld(v1, 'fleet reload r5')).toEqual({ ok: true });
    expect((await c.commitHeld(8)).epoch).toBe(8);
  });
});

describe('rolling reload', () => {
  test('node by node, in order', async () => {
    const log: string[] = [];
    const c = coordinator([fakeNode(0, {}, log), fakeNode(1, {}, log), fakeNode(2, {}, log)]);
    const outcome = await c.reload(v2, 'rolling', 'test');
    expect(outcome).toMatchObject({ result: 'committed', epoch: 1 });
    expect(log).toEqual(['0:roll@1:2', '1:roll@1:2', '2:roll@1:2']);
    expect(outcome.nodes.map((node) => node.state)).toEqual(['rolled', 'rolled', 'rolled']);
  });

  test('a failure moves every node back to the previous table at the next epoch, answers checked', async () => {
    const log: string[] = [];
    const nodes = [
      fakeNode(0, {}, log),
      fakeNode(1, {}, log),
      fakeNode(2, { roll: answers({ ok: false, error: 'out of memory' }, ok) }, log),
      fakeNode(3, {}, log),
    ];
    const c = coordinator(nodes);
    const outcome = await c.reload(v2, 'rolling', 'test');
    expect(outcome).toMatchObject({ result: 'failed', epoch: 2 });
    expect(outcome.error).toContain('rolling reload failed on node 2: out of memory');
    expect(outcome.error).toContain(
      'node 0 rolled back, node 1 rolled back, node 2 restored, node 3 unchanged',
    );
    // Epochs only grow: the way back is epoch 2, serving the previous table. The failing node confirms first,
    // then the rolled ones in reverse, then the one never reached moves epoch.
    expect(log).toEqual([
      '0:roll@1:2',
      '1:roll@1:2',
      '2:roll@1:2',
      '2:roll@2:1',
      '1:roll@2:1',
      '0:roll@2:1',
      '3:roll@2:1',
    ]);
    expect(outcome.nodes).toEqual([
      { node: 0, state: 'rolled_back' },
      { node: 1, state: 'rolled_back' },
      { node: 2, state: 'restored' },
      { node: 3, state: 'unchanged' },
    ]);
    expect(c.table).toBe(v1);
    expect(c.epoch).toBe(2);
  });

  test('a node whose roll-back fails is restarted onto the previous table, and the outcome says so', async () => {
    const log: string[] = [];
    let epochAtRestart = -1;
    let tableAtRestart: TablePlan | undefined;
    const c = coordinator([
      fakeNode(
        0,
        {
          roll: answers(ok, { ok: false, error: 'cannot load version 1' }),
          restart: async () => {
            epochAtRestart = c.epoch;
            tableAtRestart = c.table;
            return ok;
          },
        },
        log,
      ),
      fakeNode(1, { roll: answers({ ok: false, error: 'bad file' }, ok) }, log),
    ]);
    const outcome = await c.reload(v2, 'rolling', 'test');
    expect(outcome.result).toBe('failed');
    expect(outcome.nodes).toEqual([
      { node: 0, state: 'restarted', error: 'roll back: cannot load version 1' },
      { node: 1, state: 'restored' },
    ]);
    expect(outcome.error).toContain('node 0 restarted, node 1 restored');
    expect(outcome.error).not.toContain('every node');
    expect(outcome.warnings?.[0]).toContain('node 0 could not return to the previous table');
    expect(log).toEqual(['0:roll@1:2', '1:roll@1:2', '1:roll@2:1', '0:roll@2:1', '0:restart']);
    expect(epochAtRestart).toBe(2);
    expect(tableAtRestart).toBe(v1);
  });

  test('a failing node that cannot confirm it restored itself is restarted; a failed restart is reported', async () => {
    const c = coordinator([
      fakeNode(0),
      fakeNode(1, {
        roll: async () => ({ ok: false, error: 'no answer (the node died or timed out)' }),
        restart: async () => ({ ok: false, error: 'node 1 did not become ready within 120s' }),
      }),
    ]);
    const outcome = await c.reload(v2, 'rolling', 'test');
    expect(outcome.nodes).toEqual([
      { node: 0, state: 'rolled_back' },
      {
        node: 1,
        state: 'restart_failed',
        error:
          'roll: no answer (the node died or timed out); roll back: no answer (the node died or timed out); restart: node 1 did not become ready within 120s',
      },
    ]);
    expect(outcome.error).toContain('node 0 rolled back, node 1 restart failed');
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

describe('the host persists its table before COMMIT', () => {
  const full = () => {
    throw new ProtocolError(
      'storage_full',
      'cannot save /state/registry.json: ENOSPC: no space left on device',
    );
  };
  function persisting(nodes: NodeChannel[], persist: (plan: TablePlan) => void) {
    let clock = 0;
    return new ReloadCoordinator(v1, { nodes: () => nodes, now: () => (clock += 10), persist });
  }

  test('atomic: saved after every node prepared and before any commits', async () => {
    const log: string[] = [];
    const c = persisting([fakeNode(0, {}, log), fakeNode(1, {}, log)], (plan) =>
      log.push(`persist ${plan.models[0]!.stable}`),
    );
    expect((await c.reload(v2, 'atomic', 'test')).result).toBe('committed');
    expect(log).toEqual([
      '0:prepare',
      '1:prepare',
      'persist 2',
      '0:commit@1',
      '1:commit@1',
      '0:release',
      '1:release',
    ]);
  });

  test('atomic: a full disk aborts on every node, nothing changes, the outcome names storage_full', async () => {
    const log: string[] = [];
    const c = persisting([fakeNode(0, {}, log), fakeNode(1, {}, log)], full);
    const outcome = await c.reload(v2, 'atomic', 'test');
    expect(outcome).toMatchObject({ result: 'failed', code: 'storage_full', epoch: 0 });
    expect(outcome.error).toMatch(/^cannot persist the registry state, nothing changed: .*ENOSPC/);
    expect(log).toEqual(['0:prepare', '1:prepare', '0:abort', '1:abort']);
    expect(c.table).toBe(v1);
    expect(c.epoch).toBe(0);
  });

  test('rolling: a full disk refuses before any node rolls', async () => {
    const log: string[] = [];
    const c = persisting([fakeNode(0, {}, log)], full);
    const outcome = await c.reload(v2, 'rolling', 'test');
    expect(outcome).toMatchObject({ result: 'failed', code: 'storage_full', epoch: 0 });
    expect(log).toEqual([]);
  });

  test('rolling: a failed roll saves the previous table again', async () => {
    const saved: string[] = [];
    const c = persisting([fakeNode(0, { roll: answers({ ok: false, error: 'bad' }, ok) })], (plan) =>
      saved.push(plan.models[0]!.stable),
    );
    expect((await c.reload(v2, 'rolling', 'test')).result).toBe('failed');
    expect(saved).toEqual(['2', '1']);
  });

  test('what the fleet decided commits anyway (its record is durable): the outcome warns', async () => {
    const log: string[] = [];
    const c = persisting([fakeNode(0, {}, log)], full);
    expect(await c.prepareHeld(v2, 'fleet reload r1')).toEqual({ ok: true });
    const held = await c.commitHeld(3);
    expect(held.result).toBe('committed');
    expect(held.warnings).toEqual([expect.stringMatching(/registry state not saved.*ENOSPC/)]);
    const caughtUp = await c.reload(v1, 'atomic', 'catch up', 4);
    expect(caughtUp.result).toBe('committed');
    expect(caughtUp.warnings).toEqual([expect.stringMatching(/registry state not saved/)]);
  });
});
