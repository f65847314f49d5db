import type { BackpressureOptions } from './index';
import { BackpressureError, ClientState, ModelQueueGuard, validateBackpressureOptions } from './index';
import { MIB } from './options';

const base: BackpressureOptions = { rateLimitRps: 100, maxInflightPerClient: 1000, maxModelQueue: 4096 };

function optionError(raw: unknown): BackpressureError {
  try {
    validateBackpressureOptions(raw);
  } catch (error) {
    expect(error).toBeInstanceOf(BackpressureError);
    return error as BackpressureError;
  }
  throw new Error('expected a BackpressureError');
}

describe('validateBackpressureOptions', () => {
  it('fills in every default and freezes the result', () => {
    const o = validateBackpressureOptions(base);
    expect(o).toEqual({
      rateLimitRps: 100,
      rateLimitBurst: 100,
      maxInflightPerClient: 1000,
      warnInflightFraction: 0.8,
      inflightResetFraction: 0.5,
      maxModelQueue: 4096,
      lowPriorityQueueFraction: 0.5,
      shadowPriorityQueueFraction: 0.25,
      highPriorityHeadroomFraction: 0.1,
      drainRateWindowMs: 1000,
      minRetryAfterMs: 10,
      maxRetryAfterMs: 30_000,
      defaultRetryAfterMs: 1000,
      slowConsumerWarnBytes: MIB,
      slowConsumerCloseBytes: 8 * MIB,
      slowConsumerResetBytes: MIB / 2,
      modelErrorPenalty: 9,
    });
    expect(Object.isFrozen(o)).toBe(true);
    expect(validateBackpressureOptions(o)).toBe(o);
  });

  it('derives defaults from the options they depend on', () => {
    expect(validateBackpressureOptions({ ...base, rateLimitRps: 0.5 }).rateLimitBurst).toBe(1);
    expect(validateBackpressureOptions({ ...base, rateLimitRps: 0 }).rateLimitBurst).toBe(1);
    expect(validateBackpressureOptions({ ...base, warnInflightFraction: 0.4 }).inflightResetFraction).toBe(
      0.2,
    );
    expect(
      validateBackpressureOptions({ ...base, lowPriorityQueueFraction: 0.6 }).shadowPriorityQueueFraction,
    ).toBe(0.3);
    expect(validateBackpressureOptions({ ...base, slowConsumerWarnBytes: 1001 }).slowConsumerResetBytes).toBe(
      500,
    );
    expect(validateBackpressureOptions({ ...base, maxRetryAfterMs: 500 }).defaultRetryAfterMs).toBe(500);
    expect(validateBackpressureOptions({ ...base, minRetryAfterMs: 2000 }).defaultRetryAfterMs).toBe(2000);
    const slow = validateBackpressureOptions({ ...base, minRetryAfterMs: 40_000 });
    expect([slow.maxRetryAfterMs, slow.defaultRetryAfterMs]).toEqual([40_000, 40_000]);
  });

  it('accepts the edges of every range', () => {
    const o = validateBackpressureOptions({
      rateLimitRps: 0,
      rateLimitBurst: 0,
      maxInflightPerClient: 1,
      warnInflightFraction: 1,
      inflightResetFraction: 0,
      maxModelQueue: 1,
      lowPriorityQueueFraction: 1,
      shadowPriorityQueueFraction: 1,
      highPriorityHeadroomFraction: 0,
      drainRateWindowMs: 0.5,
      minRetryAfterMs: 0,
      maxRetryAfterMs: 0,
      defaultRetryAfterMs: 0,
      slowConsumerWarnBytes: 1,
      slowConsumerCloseBytes: 2,
      slowConsumerResetBytes: 0,
      modelErrorPenalty: 0,
    });
    expect(o.rateLimitBurst).toBe(0);
    expect(o.modelErrorPenalty).toBe(0);
    expect(
      validateBackpressureOptions({ ...base, rateLimitRps: 0.25, rateLimitBurst: 1 }).rateLimitBurst,
    ).toBe(1);
    expect(
      validateBackpressureOptions({ ...base, highPriorityHeadroomFraction: 1 }).highPriorityHeadroomFraction,
    ).toBe(1);
  });

  it.each<[string, unknown]>([
    ['options', null],
    ['options', 'fast'],
    ['options', [1]],
    ['rateLimitRps', { ...base, rateLimitRps: undefined }],
    ['rateLimitRps', { ...base, rateLimitRps: -1 }],
    ['rateLimitRps', { ...base, rateLimitRps: Number.NaN }],
    ['rateLimitRps', { ...base, rateLimitRps: Number.POSITIVE_INFINITY }],
    ['rateLimitRps', { ...base, rateLimitRps: '100' }],
    ['rateLimitBurst', { ...base, rateLimitBurst: 0.5 }],
    ['rateLimitBurst', { ...base, rateLimitRps: 0, rateLimitBurst: -1 }],
    ['maxInflightPerClient', { ...base, maxInflightPerClient: 0 }],
    ['maxInflightPerClient', { ...base, maxInflightPerClient: 1.5 }],
    ['maxInflightPerClient', { rateLimitRps: 1, maxModelQueue: 1 }],
    ['warnInflightFraction', { ...base, warnInflightFraction: 0 }],
    ['warnInflightFraction', { ...base, warnInflightFraction: 1.01 }],
    ['inflightResetFraction', { ...base, inflightResetFraction: 0.8 }],
    ['inflightResetFraction', { ...base, warnInflightFraction: 0.6, inflightResetFraction: 0.7 }],
    ['inflightResetFraction', { ...base, inflightResetFraction: -0.1 }],
    ['maxModelQueue', { ...base, maxModelQueue: 0 }],
    ['maxModelQueue', { ...base, maxModelQueue: '4096' }],
    ['lowPriorityQueueFraction', { ...base, lowPriorityQueueFraction: 0 }],
    ['lowPriorityQueueFraction', { ...base, lowPriorityQueueFraction: 2 }],
    ['shadowPriorityQueueFraction', { ...base, shadowPriorityQueueFraction: 0.6 }],
    ['shadowPriorityQueueFraction', { ...base, shadowPriorityQueueFraction: 0 }],
    ['highPriorityHeadroomFraction', { ...base, highPriorityHeadroomFraction: -0.1 }],
    ['highPriorityHeadroomFraction', { ...base, highPriorityHeadroomFraction: 1.5 }],
    ['drainRateWindowMs', { ...base, drainRateWindowMs: 0 }],
    ['minRetryAfterMs', { ...base, minRetryAfterMs: -1 }],
    ['minRetryAfterMs', { ...base, minRetryAfterMs: 10.5 }],
    ['maxRetryAfterMs', { ...base, minRetryAfterMs: 100, maxRetryAfterMs: 99 }],
    ['defaultRetryAfterMs', { ...base, defaultRetryAfterMs: 5 }],
    ['defaultRetryAfterMs', { ...base, defaultRetryAfterMs: 30_001 }],
    ['slowConsumerWarnBytes', { ...base, slowConsumerWarnBytes: 0 }],
    ['slowConsumerCloseBytes', { ...base, slowConsumerCloseBytes: MIB }],
    ['slowConsumerCloseBytes', { ...base, slowConsumerWarnBytes: 8 * MIB }],
    ['slowConsumerResetBytes', { ...base, slowConsumerResetBytes: MIB }],
    ['slowConsumerResetBytes', { ...base, slowConsumerResetBytes: -1 }],
    ['modelErrorPenalty', { ...base, modelErrorPenalty: -1 }],
    ['modelErrorPenalty', { ...base, modelErrorPenalty: Number.POSITIVE_INFINITY }],
    ['modelErrorPenalty', { ...base, modelErrorPenalty: '9' }],
    ['rateLimt', { ...base, rateLimt: 5 }],
  ])('names %s', (option, raw) => {
    const error = optionError(raw);
    expect(error.option).toBe(option);
    expect(error.code).toBe('invalid_backpressure_option');
    expect(error.message).toContain(option === 'options' ? 'an object' : option);
  });

  it('says what was expected and what was given', () => {
    expect(optionError({ ...base, maxModelQueue: -3 }).message).toBe(
      'invalid backpressure option maxModelQueue: expected an integer >= 1, got -3',
    );
    expect(optionError({ ...base, warnInflightFraction: 2 }).message).toBe(
      'invalid backpressure option warnInflightFraction: expected a number > 0 and <= 1, got 2',
    );
    expect(optionError({ ...base, rateLimitRps: '5' }).message).toBe(
      'invalid backpressure option rateLimitRps: expected a finite number >= 0, got "5"',
    );
    expect(optionError({ ...base, bogus: 1 }).message).toBe('unknown backpressure option "bogus"');
  });

  it('is run by the constructors', () => {
    expect(() => new ClientState({ ...base, maxInflightPerClient: 0 }, 0)).toThrow(BackpressureError);
    expect(() => new ModelQueueGuard({ ...base, maxModelQueue: 0 }, 0)).toThrow(/maxModelQueue/);
  });
});
