/**
 * The rollout bench's candidate versions of `digits` (scripts/models/rollout-candidates.ts), checked with
 * onnxruntime-node on the repository's data: what the server will compute.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as ort from 'onnxruntime-node';
import { predictDigits } from '../../scripts/models/evaluate';
import {
  candidateFigures,
  errsOnAClass,
  MISCLASSIFIED,
  retrained,
  SLOW_CHAIN,
  slowedDown,
  writeRolloutCandidates,
} from '../../scripts/models/rollout-candidates';
import { digits, MODELS_DIR, modelFile } from './data';

const v2 = readFileSync(modelFile('digits', '2'));

async function probabilities(bytes: Uint8Array, rows: number): Promise<Float32Array> {
  const d = digits();
  const session = await ort.InferenceSession.create(bytes, { intraOpNumThreads: 1 });
  try {
    const input = new ort.Tensor('float32', Float32Array.from(d.pixels.subarray(0, rows * 64)), [rows, 64]);
    const out = await session.run({ pixels: input });
    return out['probabilities']!.data as Float32Array;
  } finally {
    await session.release();
  }
}

describe('rollout candidates', () => {
  it('errs on a class: every row v2 calls a 7 is answered 1, every other row exactly as v2', async () => {
    const d = digits();
    const bytes = errsOnAClass(v2);
    expect(Buffer.from(errsOnAClass(v2)).equals(Buffer.from(bytes))).toBe(true);
    const base = await predictDigits(v2, d);
    const pred = await predictDigits(bytes, d);
    let moved = 0;
    for (let i = 0; i < d.n; i++) {
      if (base[i] === MISCLASSIFIED.from) {
        expect(pred[i]).toBe(MISCLASSIFIED.to);
        moved++;
      } else expect(pred[i]).toBe(base[i]);
    }
    // ~10 % of rows: the digits data is balanced over 10 classes (179 of 1797 measured)
    expect(moved / d.n).toBeGreaterThan(0.08);
    expect(moved / d.n).toBeLessThan(0.12);
    const p = await probabilities(bytes, 50);
    for (let r = 0; r < 50; r++) {
      let sum = 0;
      for (let c = 0; c < 10; c++) sum += p[r * 10 + c]!;
      expect(sum).toBeCloseTo(1, 4);
      expect(p[r * 10 + MISCLASSIFIED.from]).toBeLessThan(1e-6);
    }
  });

  it('slow: the same probabilities as v2, the redundant chain computed', async () => {
    const small = slowedDown(v2, { width: 16, depth: 3, seed: 1 });
    const [a, b] = [await probabilities(v2, 200), await probabilities(small, 200)];
    for (let i = 0; i < a.length; i++) expect(b[i]).toBe(a[i]);
    // the shipped size: same answers on a few rows (20 ms a row, so only a few), a 4.6 MB file
    const full = slowedDown(v2);
    expect(full.length).toBeGreaterThan(SLOW_CHAIN.width * SLOW_CHAIN.width * 4);
    expect(full.length).toBeLessThan(6e6);
    const [c, e] = [await probabilities(v2, 5), await probabilities(full, 5)];
    for (let i = 0; i < c.length; i++) expect(e[i]).toBe(c[i]);
  });

  it('good: v2 retrained with another seed — accurate, and rarely different from v2', async () => {
    const d = digits();
    const figures = await candidateFigures(d, v2, { '5': retrained(d) });
    const good = figures.find((f) => f.version === '5')!;
    expect(good.heldOutAccuracy).toBeGreaterThanOrEqual(0.93);
    expect(good.disagreementWithV2).toBeLessThan(0.02);
    // a training run: seconds, more on a busy host
  }, 120_000);

  it('are written to a scratch repository, never to models/', () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'rollout-candidates-'));
    try {
      const files = writeRolloutCandidates(dir, { '3': errsOnAClass(v2) });
      expect(files).toEqual([path.join(dir, 'digits', '3', 'model.onnx')]);
      expect(readFileSync(files[0]!).length).toBeGreaterThan(v2.length);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    const shipped = readdirSync(path.join(MODELS_DIR, 'digits'), { withFileTypes: true })
      .filter((e) => e.isDirectory())
      .map((e) => e.name)
      .sort();
    expect(shipped).toEqual(['1', '2']);
  });
});
