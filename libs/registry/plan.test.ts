import { ProtocolError, unknownModel } from '../protocol';
import {
  defaultModelPlan,
  findModel,
  type ModelPlan,
  type NodeSettings,
  type Planned,
  type RegistryChange,
  type RepositoryModel,
  registryChange,
  registryStateOf,
  registryTransition,
  repositoryPlan,
  rescanPlan,
  type TablePlan,
  versionReloadPlan,
  withModel,
  withoutFailed,
  withSavedState,
  withSettings,
} from './index';

const repo = (name: string, versions: string[], defaultVersion: string): RepositoryModel => ({
  name,
  versions: versions.map((version) => ({ version, file: `${version}/model.onnx` })),
  defaultVersion,
});

const entries = [repo('echo', ['1', '2', '3'], '1'), repo('digits', ['1'], '1')];

const table = (...models: ModelPlan[]): TablePlan => ({ defaultModel: 'echo', models });

function ok<T>(planned: Planned<T>): T {
  if (!planned.ok) throw new Error(`rejected: ${planned.error.code} ${planned.error.message}`);
  return planned.value;
}

function rejected<T>(planned: Planned<T>): ProtocolError {
  if (planned.ok) throw new Error(`accepted: ${JSON.stringify(planned.value)}`);
  return planned.error;
}

const stableOnly: ModelPlan = { name: 'echo', versions: ['1', '2', '3'], stable: '1' };
const withCandidate: ModelPlan = { ...stableOnly, candidate: '2', canaryPercent: 10, shadow: true };

describe('unknownModel', () => {
  test('is the one unknown_model error, naming what there is', () => {
    const error = unknownModel('nope', ['echo', 'digits']);
    expect(error).toBeInstanceOf(ProtocolError);
    expect(error.code).toBe('unknown_model');
    expect(error.httpStatus).toBe(404);
    expect(error.message).toBe('unknown model "nope"; available: echo, digits');
    expect(unknownModel('nope', new Set(['a'])).message).toBe('unknown model "nope"; available: a');
  });
});

describe('repositoryPlan', () => {
  test('loads every version with config.json default as stable', () => {
    expect(repositoryPlan(entries, 'echo')).toEqual({
      defaultModel: 'echo',
      models: [
        { name: 'echo', versions: ['1', '2', '3'], stable: '1' },
        { name: 'digits', versions: ['1'], stable: '1' },
      ],
    });
  });

  test('a rescan keeps an API-chosen stable, candidate, canary, shadow and previous stable', () => {
    const current = table({ ...withCandidate, stable: '3', previousStable: '1' });
    const lastDefaults = new Map([['echo', '1']]);
    const plan = repositoryPlan(entries, 'echo', current, lastDefaults);
    expect(plan.models[0]).toEqual({
      name: 'echo',
      versions: ['1', '2', '3'],
      stable: '3',
      candidate: '2',
      canaryPercent: 10,
      shadow: true,
      previousStable: '1',
    });
  });

  test('a rescan resets stable to config.json default when that default moved', () => {
    const current = table({ ...stableOnly, stable: '3' });
    const plan = repositoryPlan(
      [repo('echo', ['1', '2', '3'], '2')],
      'echo',
      current,
      new Map([['echo', '1']]),
    );
    expect(plan.models[0]!.stable).toBe('2');
  });

  test('a rescan drops aliases naming versions that are gone', () => {
    const current = table({ ...withCandidate, stable: '3', previousStable: '2' });
    const plan = repositoryPlan([repo('echo', ['1'], '1')], 'echo', current, new Map([['echo', '1']]));
    expect(plan.models[0]).toEqual({ name: 'echo', versions: ['1'], stable: '1' });
  });
});

describe('withSavedState', () => {
  const plan = repositoryPlan(entries, 'echo');

  test('applies saved aliases, canary, shadow and default model', () => {
    const saved = withSavedState(
      plan,
      {
        defaultModel: 'digits',
        configuredDefaultModel: 'echo',
        models: {
          echo: { stable: '2', candidate: '3', previousStable: '1', canaryPercent: 25, shadow: true },
        },
      },
      'echo',
    );
    expect(saved.notices).toEqual([]);
    expect(saved.plan.defaultModel).toBe('digits');
    expect(saved.plan.models[0]).toEqual({
      name: 'echo',
      versions: ['1', '2', '3'],
      stable: '2',
      candidate: '3',
      previousStable: '1',
      canaryPercent: 25,
      shadow: true,
    });
    expect(saved.plan.models[1]).toEqual(plan.models[1]);
  });

  test('a saved state naming missing versions leaves that model at the repository defaults, with a warning', () => {
    const saved = withSavedState(
      plan,
      { models: { echo: { stable: '9', candidate: '2', canaryPercent: 50, shadow: false } } },
      'echo',
    );
    expect(saved.plan.models[0]).toEqual(plan.models[0]);
    expect(saved.notices).toEqual([
      {
        level: 'warn',
        details: { model: 'echo', missing: ['9'] },
        message: expect.stringContaining('versions that are gone'),
      },
    ]);
  });

  test('a changed configured default model wins over the saved one', () => {
    const saved = withSavedState(
      plan,
      { defaultModel: 'digits', configuredDefaultModel: 'other', models: {} },
      'echo',
    );
    expect(saved.plan.defaultModel).toBe('echo');
    expect(saved.notices.map((n) => n.level)).toEqual(['info']);
  });

  test('a saved default model that is gone is ignored, with a warning', () => {
    const saved = withSavedState(plan, { defaultModel: 'gone', models: {} }, 'echo');
    expect(saved.plan.defaultModel).toBe('echo');
    expect(saved.notices).toEqual([
      { level: 'warn', details: { saved: 'gone', configured: 'echo' }, message: expect.any(String) },
    ]);
  });

  test('registryStateOf writes what withSavedState reads back', () => {
    const served = table(
      { ...withCandidate, previousStable: '3' },
      { name: 'digits', versions: ['1'], stable: '1' },
    );
    const state = registryStateOf(served, 'echo');
    expect(state).toEqual({
      defaultModel: 'echo',
      configuredDefaultModel: 'echo',
      models: {
        echo: { stable: '1', candidate: '2', previousStable: '3', canaryPercent: 10, shadow: true },
        digits: { stable: '1', canaryPercent: 0, shadow: false },
      },
    });
    const back = withSavedState(repositoryPlan(entries, 'echo'), state, 'echo');
    expect(back.notices).toEqual([]);
    expect(back.plan.models[0]).toEqual({ ...served.models[0], versions: ['1', '2', '3'] });
  });
});

describe('registry actions', () => {
  test('findModel: the model, or unknown_model naming those there are', () => {
    const current = table(stableOnly);
    expect(ok(findModel(current, 'echo'))).toBe(stableOnly);
    const error = rejected(findModel(current, 'nope'));
    expect(error.code).toBe('unknown_model');
    expect(error.message).toBe('unknown model "nope"; available: echo');
  });

  test('registryChange checks each body field for type', () => {
    expect(ok(registryChange('candidate', { version: 2 }))).toEqual({ action: 'candidate', version: '2' });
    expect(rejected(registryChange('candidate', { version: '' })).message).toBe(
      '"version" must name a version',
    );
    expect(rejected(registryChange('candidate', {})).code).toBe('bad_request');
    expect(rejected(registryChange('canary', { percent: '5' })).message).toBe(
      '"percent" must be a number from 0 to 100',
    );
    expect(rejected(registryChange('shadow', { enabled: 'yes' })).message).toBe(
      '"enabled" must be true or false',
    );
    expect(ok(registryChange('promote', { ignored: 1 }))).toEqual({ action: 'promote' });
    expect(ok(registryChange('rollback', {}))).toEqual({ action: 'rollback' });
  });

  test('candidate: loaded beside stable with canary 0 and shadow off', () => {
    const model: ModelPlan = { name: 'echo', versions: ['1'], stable: '1' };
    expect(ok(registryTransition(model, { action: 'candidate', version: '2' }, ['1', '2']))).toEqual({
      name: 'echo',
      versions: ['1', '2'],
      stable: '1',
      candidate: '2',
      canaryPercent: 0,
      shadow: false,
    });
  });

  test('candidate: an unknown version is rejected, naming those found', () => {
    const error = rejected(registryTransition(stableOnly, { action: 'candidate', version: '7' }, ['1', '2']));
    expect(error.code).toBe('unknown_version');
    expect(error.message).toBe('model "echo" has no version "7"; found 1, 2');
  });

  test('canary: within 0..100 with a candidate', () => {
    expect(ok(registryTransition(withCandidate, { action: 'canary', percent: 0 })).canaryPercent).toBe(0);
    expect(ok(registryTransition(withCandidate, { action: 'canary', percent: 100 })).canaryPercent).toBe(100);
    expect(ok(registryTransition(withCandidate, { action: 'canary', percent: 12.5 }))).toEqual({
      ...withCandidate,
      canaryPercent: 12.5,
    });
  });

  test('canary: out of bounds is rejected before a missing candidate', () => {
    for (const percent of [-1, 100.5, Number.NaN, Number.POSITIVE_INFINITY]) {
      const error = rejected(registryTransition(stableOnly, { action: 'canary', percent }));
      expect(error.code).toBe('bad_request');
      expect(error.message).toBe('"percent" must be a number from 0 to 100');
    }
  });

  test('canary and shadow without a candidate are rejected; shadow off is always allowed', () => {
    const changes: RegistryChange[] = [
      { action: 'canary', percent: 5 },
      { action: 'shadow', enabled: true },
    ];
    for (const change of changes) {
      const error = rejected(registryTransition(stableOnly, change));
      expect(error.code).toBe('bad_request');
      expect(error.message).toBe('model "echo" has no candidate: deploy one first');
    }
    expect(ok(registryTransition(stableOnly, { action: 'shadow', enabled: false }))).toEqual({
      ...stableOnly,
      canaryPercent: 0,
      shadow: false,
    });
    expect(ok(registryTransition(withCandidate, { action: 'shadow', enabled: false })).shadow).toBe(false);
  });

  test('promote: the candidate becomes stable, the old stable the previous one', () => {
    expect(ok(registryTransition(withCandidate, { action: 'promote' }))).toEqual({
      name: 'echo',
      versions: ['1', '2', '3'],
      stable: '2',
      previousStable: '1',
      canaryPercent: 0,
      shadow: false,
    });
  });

  test('promote without a candidate is rejected', () => {
    const error = rejected(registryTransition(stableOnly, { action: 'promote' }));
    expect(error.code).toBe('bad_request');
    expect(error.message).toBe('model "echo" has no candidate to promote');
  });

  test('rollback: stable goes back to the previous stable, which stays loaded', () => {
    const promoted = ok(registryTransition(withCandidate, { action: 'promote' }));
    expect(ok(registryTransition(promoted, { action: 'rollback' }))).toEqual({
      ...promoted,
      stable: '1',
      previousStable: '2',
    });
    // A candidate that is the version rolled back to stops being a candidate.
    const model: ModelPlan = {
      name: 'echo',
      versions: ['2'],
      stable: '2',
      previousStable: '1',
      candidate: '1',
    };
    expect(
      ok(registryTransition({ ...model, canaryPercent: 30, shadow: true }, { action: 'rollback' })),
    ).toEqual({
      name: 'echo',
      versions: ['2', '1'],
      stable: '1',
      previousStable: '2',
      canaryPercent: 0,
      shadow: false,
    });
  });

  test('rollback without a previous stable is rejected', () => {
    const error = rejected(registryTransition(withCandidate, { action: 'rollback' }));
    expect(error.code).toBe('bad_request');
    expect(error.message).toBe('model "echo" has no previous stable version to roll back to');
  });

  test('withModel replaces one model and keeps the rest of the table', () => {
    const digits: ModelPlan = { name: 'digits', versions: ['1'], stable: '1' };
    const current = { ...table(stableOnly, digits), defaultModel: 'digits' };
    const next = withModel(current, withCandidate);
    expect(next).toEqual({ defaultModel: 'digits', models: [withCandidate, digits] });
    expect(current.models[0]).toBe(stableOnly);
  });
});

describe('reload plans', () => {
  const current = table({ ...stableOnly, versions: ['1'] }, { name: 'digits', versions: ['1'], stable: '1' });

  test('a version reload (atomic) makes it stable and keeps the old one loaded as previous', () => {
    expect(ok(versionReloadPlan(current, 'echo', '2', ['1', '2'], 'atomic')).models[0]).toEqual({
      name: 'echo',
      versions: ['1', '2'],
      stable: '2',
      previousStable: '1',
    });
    // Reloading the stable version itself changes nothing.
    expect(ok(versionReloadPlan(current, 'echo', '1', ['1', '2'], 'atomic')).models[0]).toEqual(
      current.models[0],
    );
  });

  test('a version reload (rolling) swaps in place: only that version stays loaded', () => {
    expect(ok(versionReloadPlan(current, 'echo', '2', ['1', '2'], 'rolling')).models[0]).toEqual({
      name: 'echo',
      versions: ['2'],
      stable: '2',
    });
  });

  test('a version reload of a model not in the table adds it', () => {
    expect(ok(versionReloadPlan(current, 'new', '4', ['4'], 'atomic')).models).toEqual([
      ...current.models,
      { name: 'new', versions: ['4'], stable: '4' },
    ]);
  });

  test('a version the repository does not have is rejected', () => {
    const error = rejected(versionReloadPlan(current, 'echo', '9', ['1', '2'], 'atomic'));
    expect(error.code).toBe('unknown_version');
    expect(error.message).toBe('model "echo" has no version "9" in the repository; found 1, 2');
  });

  test('a default-model reload needs a model of the table', () => {
    expect(ok(defaultModelPlan(current, 'digits'))).toEqual({ ...current, defaultModel: 'digits' });
    const error = rejected(defaultModelPlan(current, 'nope'));
    expect(error.code).toBe('unknown_model');
    expect(error.message).toBe('unknown model "nope"; available: echo, digits');
  });

  test('a rescan keeps the API-chosen stable and needs the default model in the repository', () => {
    const chosen = table({ ...stableOnly, stable: '3' });
    expect(ok(rescanPlan(entries, 'echo', chosen, new Map([['echo', '1']]))).models[0]!.stable).toBe('3');
    const error = rejected(rescanPlan(entries, 'gone', chosen, new Map()));
    expect(error.code).toBe('unknown_model');
    expect(error.message).toBe('default model "gone" is not in the repository');
  });

  test('withSettings: those asked for, else the current table, else the plan own', () => {
    const settings = (logLevel: string) => ({ logLevel }) as NodeSettings;
    const plan = { ...current, settings: settings('plan') };
    expect(
      withSettings(plan, { ...current, settings: settings('current') }, settings('asked')).settings,
    ).toEqual(settings('asked'));
    expect(withSettings(plan, { ...current, settings: settings('current') }).settings).toEqual(
      settings('current'),
    );
    expect(withSettings(plan, current).settings).toEqual(settings('plan'));
  });
});

describe('withoutFailed (load what loads)', () => {
  const table = {
    defaultModel: 'digits',
    models: [
      {
        name: 'digits',
        versions: ['1', '2', '3'],
        stable: '3',
        previousStable: '2',
        candidate: '1',
        canaryPercent: 10,
      },
      { name: 'echo', versions: ['1'], stable: '1' },
      { name: 'upper', versions: ['1', '2'], stable: '2' },
    ],
  };

  test('a failed stable falls back to the previous stable; a failed candidate is dropped', () => {
    const next = withoutFailed(table, [
      { model: 'digits', version: '3', reason: 'corrupt' },
      { model: 'digits', version: '1', reason: 'corrupt' },
    ]);
    const digits = next.models.find((m) => m.name === 'digits')!;
    expect(digits).toEqual({ name: 'digits', versions: ['2'], stable: '2', canaryPercent: 0, shadow: false });
    expect(next.unavailable).toHaveLength(2);
  });

  test('without a previous stable, the newest version that loaded; a model with none left leaves the table', () => {
    const next = withoutFailed(table, [
      { model: 'upper', version: '2', reason: 'corrupt' },
      { model: 'echo', version: '1', reason: 'corrupt' },
    ]);
    expect(next.models.map((m) => m.name)).toEqual(['digits', 'upper']);
    expect(next.models[1]).toEqual({ name: 'upper', versions: ['1'], stable: '1' });
    expect(next.defaultModel).toBe('digits');
  });

  test('a whole model failed: gone, the default model stays named', () => {
    const next = withoutFailed(table, [{ model: 'digits', reason: 'config.json: bad JSON' }]);
    expect(next.models.map((m) => m.name)).toEqual(['echo', 'upper']);
    expect(next.defaultModel).toBe('digits');
  });
});

test('a rescan accepts a default model that is in the repository but unavailable', () => {
  const current = { defaultModel: 'digits', models: [] };
  expect(rescanPlan([], 'digits', current, new Map()).ok).toBe(false);
  expect(rescanPlan([], 'digits', current, new Map(), ['digits']).ok).toBe(true);
});
