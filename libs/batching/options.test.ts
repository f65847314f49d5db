import { BatchingError, createBatchPolicy, validateBatchPolicyOptions } from './index';

function errorOf(fn: () => unknown): BatchingError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(BatchingError);
    return error as BatchingError;
  }
  throw new Error('expected a BatchingError');
}

describe('validateBatchPolicyOptions', () => {
  it('returns a frozen, normalized copy with policy defaults', () => {
    const input = {
      policy: 'greedy',
      maxBatchSize: 16,
      maxQueueDelayMs: 5,
      preferredBatchSizes: [8, 4, 8, 16],
    };
    const options = validateBatchPolicyOptions(input);
    expect(options).toEqual({
      policy: 'greedy',
      maxBatchSize: 16,
      maxQueueDelayMs: 5,
      preferredBatchSizes: [4, 8, 16],
      minBatchSize: 1,
    });
    expect(Object.isFrozen(options)).toBe(true);
    expect(Object.isFrozen(options.preferredBatchSizes)).toBe(true);
    expect(input.preferredBatchSizes).toEqual([8, 4, 8, 16]);
  });

  it('fills the adaptive objective from the queue delay', () => {
    expect(validateBatchPolicyOptions({ policy: 'adaptive', maxBatchSize: 8, maxQueueDelayMs: 7 })).toEqual({
      policy: 'adaptive',
      maxBatchSize: 8,
      maxQueueDelayMs: 7,
      sloP99Ms: 14,
    });
    const explicit = validateBatchPolicyOptions({
      policy: 'adaptive',
      maxBatchSize: 8,
      maxQueueDelayMs: 7,
      sloP99Ms: 30,
      costPrior: { interceptMs: 2, perItemMs: 0.5 },
    });
    expect(explicit.sloP99Ms).toBe(30);
    expect(explicit.costPrior).toEqual({ interceptMs: 2, perItemMs: 0.5 });
  });

  it('keeps fixed options as given and treats an empty preferred list as none', () => {
    expect(
      validateBatchPolicyOptions({
        policy: 'fixed',
        maxBatchSize: 1,
        maxQueueDelayMs: 0,
        preferredBatchSizes: [],
      }),
    ).toEqual({ policy: 'fixed', maxBatchSize: 1, maxQueueDelayMs: 0 });
  });

  it('accepts undefined optional options', () => {
    expect(
      validateBatchPolicyOptions({
        policy: 'fixed',
        maxBatchSize: 4,
        maxQueueDelayMs: 1,
        minBatchSize: undefined,
        sloP99Ms: undefined,
        preferredBatchSizes: undefined,
        costPrior: undefined,
      }),
    ).toEqual({ policy: 'fixed', maxBatchSize: 4, maxQueueDelayMs: 1 });
  });

  const base = { policy: 'greedy', maxBatchSize: 8, maxQueueDelayMs: 5 };
  const adaptive = { ...base, policy: 'adaptive' };
  const cases: Array<[string, unknown, string, RegExp]> = [
    ['not an object', null, 'options', /expected an object, got null/],
    ['an array', [], 'options', /expected an object, got an array/],
    [
      'unknown option',
      { ...base, maxBatchsize: 3 },
      'maxBatchsize',
      /unknown batch policy option "maxBatchsize"/,
    ],
    ['missing policy', { maxBatchSize: 8, maxQueueDelayMs: 5 }, 'policy', /policy: expected one of "fixed"/],
    ['unknown policy', { ...base, policy: 'lazy' }, 'policy', /got "lazy"/],
    [
      'missing maxBatchSize',
      { policy: 'fixed', maxQueueDelayMs: 5 },
      'maxBatchSize',
      /integer >= 1, got undefined/,
    ],
    ['zero maxBatchSize', { ...base, maxBatchSize: 0 }, 'maxBatchSize', /got 0/],
    ['fractional maxBatchSize', { ...base, maxBatchSize: 2.5 }, 'maxBatchSize', /got 2.5/],
    ['string maxBatchSize', { ...base, maxBatchSize: '8' }, 'maxBatchSize', /got "8"/],
    ['negative delay', { ...base, maxQueueDelayMs: -1 }, 'maxQueueDelayMs', /finite number >= 0, got -1/],
    ['infinite delay', { ...base, maxQueueDelayMs: Infinity }, 'maxQueueDelayMs', /got Infinity/],
    ['NaN delay', { ...base, maxQueueDelayMs: Number.NaN }, 'maxQueueDelayMs', /got NaN/],
    [
      'preferred not array',
      { ...base, preferredBatchSizes: 4 },
      'preferredBatchSizes',
      /an array of integers/,
    ],
    [
      'preferred too big',
      { ...base, preferredBatchSizes: [4, 9] },
      'preferredBatchSizes[1]',
      /between 1 and 8, got 9/,
    ],
    ['preferred zero', { ...base, preferredBatchSizes: [0] }, 'preferredBatchSizes[0]', /got 0/],
    ['minBatchSize too big', { ...base, minBatchSize: 9 }, 'minBatchSize', /between 1 and 8, got 9/],
    ['minBatchSize zero', { ...base, minBatchSize: 0 }, 'minBatchSize', /got 0/],
    [
      'minBatchSize on fixed',
      { ...base, policy: 'fixed', minBatchSize: 2 },
      'minBatchSize',
      /only to policy "greedy"/,
    ],
    ['sloP99Ms on greedy', { ...base, sloP99Ms: 10 }, 'sloP99Ms', /only to policy "adaptive"/],
    ['zero sloP99Ms', { ...adaptive, sloP99Ms: 0 }, 'sloP99Ms', /finite number > 0, got 0/],
    [
      'costPrior on fixed',
      { ...base, policy: 'fixed', costPrior: {} },
      'costPrior',
      /only to policy "adaptive"/,
    ],
    ['costPrior not object', { ...adaptive, costPrior: 3 }, 'costPrior', /an object/],
    ['object maxBatchSize', { ...base, maxBatchSize: { n: 1 } }, 'maxBatchSize', /got an object$/],
    [
      'costPrior negative',
      { ...adaptive, costPrior: { interceptMs: -1, perItemMs: 0 } },
      'costPrior.interceptMs',
      /-1/,
    ],
    ['costPrior missing', { ...adaptive, costPrior: { interceptMs: 1 } }, 'costPrior.perItemMs', /undefined/],
    [
      'costPrior unknown',
      { ...adaptive, costPrior: { interceptMs: 1, perItemMs: 1, x: 1 } },
      'costPrior.x',
      /"x"/,
    ],
  ];
  it.each(cases)('rejects %s', (_label, input, option, message) => {
    const error = errorOf(() => validateBatchPolicyOptions(input));
    expect(error.code).toBe('invalid_batch_option');
    expect(error.option).toBe(option);
    expect(error.message).toMatch(message);
    expect(error.message).toContain(option.replace(/\[\d+\]$/, '').split('.')[0]);
  });

  it('createBatchPolicy validates too', () => {
    const error = errorOf(() => createBatchPolicy({ policy: 'fixed', maxBatchSize: 0, maxQueueDelayMs: 1 }));
    expect(error.option).toBe('maxBatchSize');
    expect(error.name).toBe('BatchingError');
  });

  it('createBatchPolicy builds each policy', () => {
    for (const policy of ['fixed', 'greedy', 'adaptive'] as const) {
      expect(createBatchPolicy({ policy, maxBatchSize: 4, maxQueueDelayMs: 1 }).name).toBe(policy);
    }
  });
});
