/** Checkpoints are validated when read: a pointer or object that does not parse is checkpoint_invalid, named. */

import { PipelineIoError } from '../errors';
import { CHECKPOINT_VERSION, parseCheckpoint, parsePointer } from './checkpoints';

const bytes = (v: unknown) => new TextEncoder().encode(typeof v === 'string' ? v : JSON.stringify(v));

const GOOD = {
  version: CHECKPOINT_VERSION,
  id: 4,
  createdAt: '2026-12-02T01:00:00.000Z',
  position: 120,
  outputs: { predictions: 80, side: 3 },
  pin: { model: 'delay-risk', version: '1' },
  epoch: 2,
  state: {},
};

function refusal(fn: () => unknown): PipelineIoError {
  try {
    fn();
  } catch (err) {
    if (err instanceof PipelineIoError) return err;
    throw err;
  }
  throw new Error('accepted');
}

describe('checkpoint validation at read', () => {
  it('accepts what save() writes', () => {
    expect(parsePointer(bytes({ id: 4, object: 'p.p0.4.ab', position: 120, createdAt: 'x' }), 'ptr')).toEqual(
      {
        id: 4,
        object: 'p.p0.4.ab',
        position: 120,
        createdAt: 'x',
      },
    );
    expect(parseCheckpoint(bytes(GOOD), 'ckpt')).toEqual(GOOD);
  });

  it.each([
    ['{"id": 7, "object": ', /ptr: not JSON/],
    ['[1]', /ptr: not a JSON object/],
    [{ id: 1 }, /ptr: "object" must name/],
    [{ id: 0, object: 'o', position: 1, createdAt: 'x' }, /ptr: "id" must be an integer >= 1/],
    [{ id: 2, object: 'o', position: -1, createdAt: 'x' }, /ptr: "position"/],
  ])('refuses the pointer %j', (value, message) => {
    const err = refusal(() => parsePointer(bytes(value), 'ptr'));
    expect(err.code).toBe('checkpoint_invalid');
    expect(err.message).toMatch(message);
  });

  it.each([
    [{ ...GOOD, version: 2 }, /format version 2 \(this build reads 1\)/],
    [{ ...GOOD, version: undefined }, /format version undefined/],
    [{ ...GOOD, outputs: { predictions: 1 } }, /"outputs"/],
    [{ ...GOOD, pin: { model: 'delay-risk' } }, /"pin"/],
    [{ ...GOOD, createdAt: 'yesterday' }, /"createdAt"/],
    [{ ...GOOD, state: null }, /"state"/],
    [{ ...GOOD, position: 1.5 }, /"position"/],
  ])('refuses the object %#', (value, message) => {
    const err = refusal(() => parseCheckpoint(bytes(value), 'ckpt'));
    expect(err.code).toBe('checkpoint_invalid');
    expect(err.message).toMatch(message);
  });
});
