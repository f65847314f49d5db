import * as path from 'node:path';
import type { Scenario, ScenarioContext } from '../../loadtest/harness/types';
import { hotSwap } from '../../loadtest/scenarios/hot-swap';
import { overload } from '../../loadtest/scenarios/overload';
import { registry } from '../../loadtest/scenarios/registry';
import { rollout } from '../../loadtest/scenarios/rollout';
import { runaway } from '../../loadtest/scenarios/runaway';
import { slowConsumer } from '../../loadtest/scenarios/slow-consumer';

/** A context whose server never starts: every scenario must still return a report saying why. */
function failingContext(): ScenarioContext {
  return {
    repoRoot: path.join(__dirname, '..', '..', '..'),
    quick: true,
    rounds: 1,
    loadgenProcesses: 1,
    cores: 2,
    sizes: (_full, quick) => quick,
    log: () => {},
    startStreamInfer: async () => Promise.reject(new Error('no server today')),
    startBareEcho: async () => Promise.reject(new Error('no server today')),
    measure: async () => Promise.reject(new Error('nothing to measure')),
  };
}

describe('a scenario whose server fails to start still reports, with the reason', () => {
  const cases: [string, Scenario, { label: string; target: string }][] = [
    [hotSwap.name, hotSwap, { label: 'hot-swap', target: 'streaminfer' }],
    [registry.name, registry, { label: 'registry', target: 'streaminfer' }],
    [overload.name, overload, { label: 'server', target: 'honours-retry-after' }],
    [runaway.name, runaway, { label: 'server', target: 'baseline' }],
    [slowConsumer.name, slowConsumer, { label: 'server', target: 'normal' }],
    [rollout.name, rollout, { label: 'errs (v3)', target: 'streaminfer' }],
  ];
  it.each(cases)('%s', async (_name, scenario, first) => {
    const result = await scenario.run(failingContext());
    expect(result.runs[0]).toEqual({ ...first, error: 'no server today' });
    expect(result.runs.every((r) => r.server === undefined)).toBe(true);
    expect(result.params).toBeDefined();
  });
});
