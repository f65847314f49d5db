import { validateBatchPolicyOptions } from '../../libs/batching';
import type { ModelBatchingConfig, ModelEntry } from '../../libs/registry';
import type { NodeStartOptions } from './ipc';
import { batchOptionsFor } from './models';

const model = (batching: ModelBatchingConfig): ModelEntry =>
  ({ name: 'm', batching }) as unknown as ModelEntry;

/** Server defaults (greedy, 16, 50 ms), nothing explicit; `overrides` says what the operator gave. */
function server(overrides: Partial<NodeStartOptions['batch']> = {}): NodeStartOptions['batch'] {
  return {
    policy: 'greedy',
    maxBatchSize: 16,
    maxQueueDelayMs: 50,
    explicitSize: false,
    explicitTimeout: false,
    explicitPolicy: false,
    ...overrides,
  };
}

/** The options as a lane builds its policy from them (validated: a stray objective would be refused). */
const resolved = (batching: ModelBatchingConfig, batch: NodeStartOptions['batch']) =>
  validateBatchPolicyOptions(batchOptionsFor(model(batching), batch));

describe('batchOptionsFor: operator settings, model config, objective', () => {
  it('takes the model config over server defaults, and explicit operator settings over both', () => {
    const own = { policy: 'fixed', maxBatchSize: 64, maxQueueDelayMs: 5 } as const;
    expect(resolved(own, server())).toMatchObject({ policy: 'fixed', maxBatchSize: 64, maxQueueDelayMs: 5 });
    const operator = server({
      policy: 'greedy',
      maxBatchSize: 8,
      maxQueueDelayMs: 2,
      explicitSize: true,
      explicitTimeout: true,
      explicitPolicy: true,
    });
    expect(resolved(own, operator)).toMatchObject({ policy: 'greedy', maxBatchSize: 8, maxQueueDelayMs: 2 });
    // a server default that was not given explicitly does not override the model's policy
    expect(resolved(own, server({ policy: 'adaptive' })).policy).toBe('fixed');
  });

  it('batches adaptively by default when the model declares an objective', () => {
    const options = resolved({ sloP99Ms: 120, maxBatchSize: 64 }, server());
    expect(options).toMatchObject({ policy: 'adaptive', sloP99Ms: 120, maxBatchSize: 64 });
  });

  it("keeps the model's own policy over the objective's default (the objective then does not apply)", () => {
    const options = resolved({ policy: 'greedy', sloP99Ms: 120 }, server());
    expect(options.policy).toBe('greedy');
    expect(options.sloP99Ms).toBeUndefined();
  });

  it('an explicit operator policy wins over the objective default too', () => {
    const batch = server({ policy: 'fixed', explicitPolicy: true });
    expect(resolved({ sloP99Ms: 120 }, batch).policy).toBe('fixed');
  });

  it("the operator's objective overrides every model's and makes models without a policy adaptive", () => {
    const batch = server({ sloP99Ms: 30 });
    expect(resolved({ sloP99Ms: 120 }, batch)).toMatchObject({ policy: 'adaptive', sloP99Ms: 30 });
    expect(resolved({}, batch)).toMatchObject({ policy: 'adaptive', sloP99Ms: 30 });
    expect(resolved({ policy: 'greedy' }, batch).policy).toBe('greedy');
    // an explicit adaptive policy plans with the objective that applies
    const adaptive = server({ policy: 'adaptive', explicitPolicy: true });
    expect(resolved({ policy: 'fixed', sloP99Ms: 75 }, adaptive)).toMatchObject({
      policy: 'adaptive',
      sloP99Ms: 75,
    });
  });

  it('with no objective anywhere the server default policy applies', () => {
    expect(resolved({}, server()).policy).toBe('greedy');
    expect(resolved({}, server({ policy: 'fixed' })).policy).toBe('fixed');
  });
});
