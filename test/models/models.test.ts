/**
 * Checks the COMMITTED model repository (models/) with onnxruntime-node: what the server
 * will load. Run after `npm run build`: `npx jest dist/test/models`.
 */
// Must come first: makes this jest context's typed arrays those of onnxruntime-node's realm.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import * as path from 'node:path';
import * as ort from 'onnxruntime-node';
import type { TensorSpec } from '../../libs/protocol';
import { MODEL_NAMES } from '../../scripts/build-models';
import { BENCH_CONFIG } from '../../scripts/models/bench';
import { type ModelConfig, serializeConfig } from '../../scripts/models/config';
import { N_CLASSES, N_PIXELS, split } from '../../scripts/models/digits-data';
import { buildEcho } from '../../scripts/models/echo';
import { buildUpper } from '../../scripts/models/upper';
import { digits, digitsPath, MODELS_DIR, modelFile, REPO_ROOT } from './data';

const EXPECTED_MODELS = ['bench', 'delay-risk', 'digits', 'echo', 'upper'];

function readConfig(name: string): ModelConfig {
  return JSON.parse(readFileSync(path.join(MODELS_DIR, name, 'config.json'), 'utf8')) as ModelConfig;
}

function versionsOf(name: string): string[] {
  return readdirSync(path.join(MODELS_DIR, name))
    .filter((e) => statSync(path.join(MODELS_DIR, name, e)).isDirectory())
    .sort();
}

const sessions = new Map<string, ort.InferenceSession>();
async function session(name: string, version: string): Promise<ort.InferenceSession> {
  const key = `${name}/${version}`;
  let s = sessions.get(key);
  if (!s) {
    s = await ort.InferenceSession.create(modelFile(name, version), { intraOpNumThreads: 1 });
    sessions.set(key, s);
  }
  return s;
}

afterAll(async () => {
  for (const s of sessions.values()) await s.release();
});

function output(result: ort.InferenceSession.ReturnType, name: string): ort.Tensor {
  const t = result[name];
  if (!t) throw new Error(`missing output ${name}`);
  return t;
}

function argmax(data: Float32Array, rows: number, k: number): Int32Array {
  const out = new Int32Array(rows);
  for (let r = 0; r < rows; r++) {
    let best = 0;
    for (let j = 1; j < k; j++) if (data[r * k + j]! > data[r * k + best]!) best = j;
    out[r] = best;
  }
  return out;
}

describe('model repository layout', () => {
  it('holds the shipped models, each with config.json and model.onnx per version', () => {
    const names = readdirSync(MODELS_DIR)
      .filter((e) => statSync(path.join(MODELS_DIR, e)).isDirectory())
      .sort();
    expect(names).toEqual(EXPECTED_MODELS);
    for (const name of names) {
      const cfg = readConfig(name);
      expect(cfg.name).toBe(name);
      expect(typeof cfg.description).toBe('string');
      const versions = versionsOf(name);
      expect(versions.length).toBeGreaterThan(0);
      for (const v of versions) expect(existsSync(modelFile(name, v))).toBe(true);
      if (cfg.default_version !== undefined) expect(versions).toContain(cfg.default_version);
      if (cfg.labels) expect(cfg.outputs[0]?.shape).toEqual([cfg.labels.length]);
      for (const o of cfg.outputs) {
        if (o.from !== undefined) expect(cfg.inputs.find((i) => i.name === o.from)?.optional).toBe(true);
      }
    }
    expect(readConfig('digits').default_version).toBe('2');
    expect(readConfig('digits').batching?.max_batch_size).toBe(64);
    expect(versionsOf('digits')).toEqual(['1', '2']);
  });

  it('config.json files are in the canonical serialization (stable key order)', () => {
    for (const name of EXPECTED_MODELS) {
      const text = readFileSync(path.join(MODELS_DIR, name, 'config.json'), 'utf8');
      expect(serializeConfig(JSON.parse(text) as ModelConfig)).toBe(text);
    }
  });

  it.each(EXPECTED_MODELS)(
    '%s: config.json matches the ONNX sessions (names, dtypes, shapes)',
    async (name) => {
      const cfg = readConfig(name);
      for (const version of versionsOf(name)) {
        const s = await session(name, version);
        const check = (specs: TensorSpec[], meta: readonly ort.InferenceSession.ValueMetadata[]) => {
          expect(meta.map((m) => m.name)).toEqual(specs.map((t) => t.name));
          specs.forEach((spec, i) => {
            const m = meta[i]!;
            if (!m.isTensor) throw new Error(`${name}/${version} ${m.name} is not a tensor`);
            expect(m.type).toBe(spec.dtype);
            expect(m.shape.length).toBe(spec.shape.length + 1);
            expect(m.shape[0]).toBe('batch');
            spec.shape.forEach((d, j) => {
              const actual = m.shape[j + 1];
              if (d === -1) expect(typeof actual).toBe('string');
              else expect(actual).toBe(d);
            });
          });
        };
        check(cfg.inputs, s.inputMetadata);
        check(cfg.outputs, s.outputMetadata);
      }
    },
  );
});

describe('echo', () => {
  it('round-trips floats and strings in one batch', async () => {
    const s = await session('echo', '1');
    const floats = new Float32Array([1, 2.5, -3, 1e-7, 4, 5]);
    const texts = ['hi', '', 'ünïcødé ✓'];
    const r = await s.run({
      input: new ort.Tensor('float32', floats, [2, 3]),
      text: new ort.Tensor('string', texts.slice(0, 2), [2]),
    });
    expect(output(r, 'output').dims).toEqual([2, 3]);
    expect(Array.from(output(r, 'output').data as Float32Array)).toEqual(Array.from(floats));
    expect(output(r, 'text_out').data).toEqual(['hi', '']);
    const r2 = await s.run({
      input: new ort.Tensor('float32', new Float32Array(0), [3, 0]),
      text: new ort.Tensor('string', texts, [3]),
    });
    expect(output(r2, 'text_out').data).toEqual(texts);
  });

  it('accepts the empty tensors the server feeds for absent optional inputs', async () => {
    const s = await session('echo', '1');
    const r = await s.run({
      input: new ort.Tensor('float32', new Float32Array([1, 2, 3]), [1, 3]),
      text: new ort.Tensor('string', [''], [1]),
    });
    expect(Array.from(output(r, 'output').data as Float32Array)).toEqual([1, 2, 3]);
    expect(output(r, 'text_out').data).toEqual(['']);
    const r2 = await s.run({
      input: new ort.Tensor('float32', new Float32Array(0), [2, 0]),
      text: new ort.Tensor('string', ['a', 'b'], [2]),
    });
    expect(output(r2, 'output').dims).toEqual([2, 0]);
    expect(output(r2, 'text_out').data).toEqual(['a', 'b']);
  });
});

describe('upper', () => {
  it.each([[['hello']], [['abc', '', 'Mixed Case 123!', 'x']], [['']], [['', '']]])(
    'uppercases ASCII in a batch of %j',
    async (texts: string[]) => {
      const s = await session('upper', '1');
      const r = await s.run({ text: new ort.Tensor('string', texts, [texts.length]) });
      expect(output(r, 'text_out').dims).toEqual([texts.length]);
      expect(output(r, 'text_out').data).toEqual(texts.map((t) => t.toUpperCase()));
    },
  );

  it('leaves non-ASCII letters alone (locale C)', async () => {
    const s = await session('upper', '1');
    const r = await s.run({ text: new ort.Tensor('string', ['café é', 'straße'], [2]) });
    expect(output(r, 'text_out').data).toEqual(['CAFé é', 'STRAßE']);
  });
});

describe('digits', () => {
  async function predict(version: string, pixels: Float64Array, n: number) {
    const s = await session('digits', version);
    const r = await s.run({ pixels: new ort.Tensor('float32', Float32Array.from(pixels), [n, N_PIXELS]) });
    const probs = output(r, 'probabilities');
    expect(probs.dims).toEqual([n, N_CLASSES]);
    return probs.data as Float32Array;
  }

  it.each(['1', '2'])(
    'v%s: held-out accuracy ≥ 0.93 on every held-out row, from raw pixel counts',
    async (v) => {
      const { heldOut } = split(digits());
      expect(heldOut.n).toBe(359);
      const probs = await predict(v, heldOut.pixels, heldOut.n);
      const pred = argmax(probs, heldOut.n, N_CLASSES);
      let correct = 0;
      for (let i = 0; i < heldOut.n; i++) if (pred[i] === heldOut.labels[i]) correct++;
      expect(correct / heldOut.n).toBeGreaterThanOrEqual(0.93);
      for (let r = 0; r < heldOut.n; r++) {
        let sum = 0;
        for (let j = 0; j < N_CLASSES; j++) sum += probs[r * N_CLASSES + j]!;
        expect(sum).toBeCloseTo(1, 4);
      }
    },
  );

  it('v1 and v2 disagree on between 1 % and 10 % of all rows', async () => {
    const d = digits();
    expect(d.n).toBe(1797);
    const p1 = argmax(await predict('1', d.pixels, d.n), d.n, N_CLASSES);
    const p2 = argmax(await predict('2', d.pixels, d.n), d.n, N_CLASSES);
    let differ = 0;
    for (let i = 0; i < d.n; i++) if (p1[i] !== p2[i]) differ++;
    expect(differ / d.n).toBeGreaterThanOrEqual(0.01);
    expect(differ / d.n).toBeLessThanOrEqual(0.1);
  });

  it('gives the same answer for an item alone and inside a batch', async () => {
    const d = digits();
    const batch = await predict('2', d.pixels.subarray(0, 8 * N_PIXELS), 8);
    const alone = await predict('2', d.pixels.subarray(3 * N_PIXELS, 4 * N_PIXELS), 1);
    for (let j = 0; j < N_CLASSES; j++) expect(alone[j]).toBeCloseTo(batch[3 * N_CLASSES + j]!, 5);
  });
});

describe('bench', () => {
  it('maps features [N, 256] to finite scores [N, 256]', async () => {
    const cfg = readConfig('bench');
    const inDim = cfg.inputs[0]!.shape[0]!;
    const outDim = cfg.outputs[0]!.shape[0]!;
    const s = await session('bench', '1');
    for (const n of [1, 3]) {
      const x = new Float32Array(n * inDim).map((_, i) => Math.sin(i));
      const r = await s.run({ [cfg.inputs[0]!.name]: new ort.Tensor('float32', x, [n, inDim]) });
      const y = output(r, cfg.outputs[0]!.name);
      expect(y.dims).toEqual([n, outDim]);
      expect((y.data as Float32Array).every((v) => Number.isFinite(v))).toBe(true);
    }
  });

  it('stays under 25 MB on disk', () => {
    expect(statSync(modelFile('bench', '1')).size).toBeLessThan(25 * 1024 * 1024);
  });
});

describe('committed files are what the build script produces (deterministic)', () => {
  // In a child process: jest's vm context runs the PRNG loops tens of times slower. delay-risk is checked the same
  // way by delay-risk.test.ts (with its held-out AUC): its trainer is the longest build, run there only.
  const checked = MODEL_NAMES.filter((name) => name !== 'delay-risk');
  it('build-models --check reports every file up to date (retrains digits, rebuilds all but delay-risk)', () => {
    const script = path.join(REPO_ROOT, 'dist', 'scripts', 'build-models.js');
    const r = spawnSync(
      process.execPath,
      [script, '--check', '--only', checked.join(','), '--data', digitsPath()],
      {
        encoding: 'utf8',
        timeout: 110_000,
      },
    );
    if (r.status !== 0)
      throw new Error(`build-models --check failed (${r.status}):\n${r.stdout}\n${r.stderr}`);
    expect(r.stdout).toContain('all model files up to date');
    for (const f of [
      'echo/1/model.onnx',
      'upper/1/model.onnx',
      'digits/2/model.onnx',
      'bench/1/model.onnx',
    ]) {
      expect(r.stdout).toMatch(new RegExp(`${f.replace(/[/.]/g, '\\$&')}\\s+\\d+ B\\s+unchanged`));
    }
  }, 120_000);

  it('echo, upper and bench configs and graphs rebuild identically in-process', () => {
    for (const build of [buildEcho, buildUpper]) {
      const built = build();
      const name = built.config.name;
      expect(readFileSync(path.join(MODELS_DIR, name, 'config.json'), 'utf8')).toBe(
        serializeConfig(built.config),
      );
      expect(Buffer.from(built.versions['1']!).equals(readFileSync(modelFile(name, '1')))).toBe(true);
    }
    expect(readFileSync(path.join(MODELS_DIR, 'bench', 'config.json'), 'utf8')).toBe(
      serializeConfig(BENCH_CONFIG),
    );
  });
});
