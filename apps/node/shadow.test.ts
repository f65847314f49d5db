import type { ShadowOutput } from '../../libs/protocol';
import type { ShadowPair } from './request';
import { Shadow } from './shadow';

const output = (label: number): ShadowOutput =>
  ({
    dtype: 'float32',
    values: Float32Array.from([label === 0 ? 1 : 0, label === 1 ? 1 : 0]),
  }) as unknown as ShadowOutput;

function pair(mirrorIsCandidate = true): ShadowPair {
  return {
    model: 'digits',
    classifier: true,
    primary: undefined,
    candidate: undefined,
    mirrorIsCandidate,
    open: 2,
  };
}

describe('Shadow.settle', () => {
  const shadow = new Shadow(
    { models: new Map(), epoch: 0 },
    {} as never,
    {} as never,
    {} as never,
    {} as never,
  );
  const stats = () => shadow.stats.get('digits')!;

  test('a candidate failing by its own fault while stable answered is a candidate error (and skipped)', () => {
    const failed = pair();
    shadow.settle(failed, 'primary', output(0));
    shadow.settle(failed, 'candidate', undefined, 'model_error');
    expect(stats()).toMatchObject({ agree: 0, disagree: 0, skipped: 1, candidateErrors: 1 });
  });

  test('a copy late or refused at its low priority, or both sides failing, is only skipped', () => {
    for (const [primary, code] of [
      [output(0), 'deadline_exceeded'],
      [output(0), 'overloaded'],
      [undefined, 'internal'],
    ] as const) {
      const p = pair();
      shadow.settle(p, 'candidate', undefined, code);
      shadow.settle(p, 'primary', primary);
    }
    expect(stats()).toMatchObject({ skipped: 4, candidateErrors: 1 });
  });

  test("a canary's copy mirrored to stable failing is not the candidate's error", () => {
    const reversed = pair(false);
    shadow.settle(reversed, 'primary', output(0));
    shadow.settle(reversed, 'candidate', undefined, 'model_error');
    expect(stats()).toMatchObject({ skipped: 5, candidateErrors: 1 });
  });

  test('both directions compare the two answers', () => {
    const reversed = pair(false);
    shadow.settle(reversed, 'primary', output(1));
    shadow.settle(reversed, 'candidate', output(0));
    expect(stats()).toMatchObject({ disagree: 1 });
  });
});
