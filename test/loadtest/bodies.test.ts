import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { BODY_KINDS, bodyFactory, loadDigitsRows, modelInputSize, prng } from '../../loadtest/harness/bodies';
import { echoAnswer } from '../../loadtest/harness/echo-answer';
import { digitsDataPath, loadDigits } from '../../scripts/models/digits-data';

describe('body factories', () => {
  it('echo-floats: valid JSON with the id, model echo and 8 floats', () => {
    const f = bodyFactory('echo-floats', 3);
    const a = JSON.parse(f(17)) as { id: number; model: string; input: number[] };
    expect(a.id).toBe(17);
    expect(a.model).toBe('echo');
    expect(a.input).toHaveLength(8);
    expect(a.input.every((x) => typeof x === 'number' && x >= -1 && x <= 1)).toBe(true);
    expect(Object.keys(a)).toEqual(['id', 'model', 'input']);
    // deterministic per connection
    expect(bodyFactory('echo-floats', 3)(17)).toBe(f(17));
  });

  it('adds version and extra fields, and honours model / inputSize', () => {
    const f = bodyFactory('echo-floats', 0, {
      model: 'm"x',
      version: 'stable',
      extra: { priority: 'high' },
      inputSize: 3,
    });
    const a = JSON.parse(f(1)) as Record<string, unknown>;
    expect(a).toMatchObject({ id: 1, model: 'm"x', version: 'stable', priority: 'high' });
    expect(a['input']).toHaveLength(3);
  });

  it('digits: 64 integer pixel counts 0-16', () => {
    const a = JSON.parse(bodyFactory('digits', 1)(5)) as { model: string; input: number[] };
    expect(a.model).toBe('digits');
    expect(a.input).toHaveLength(64);
    expect(a.input.every((x) => Number.isInteger(x) && x >= 0 && x <= 16)).toBe(true);
  });

  it('digits rows are the shared digits data set, row for row', () => {
    const root = path.join(__dirname, '..', '..', '..');
    const rows = loadDigitsRows(root);
    const d = loadDigits(digitsDataPath(root));
    expect(rows).toHaveLength(d.n);
    expect(rows![0]).toEqual(Array.from(d.pixels.subarray(0, 64)));
    expect(rows![d.n - 1]).toEqual(Array.from(d.pixels.subarray((d.n - 1) * 64)));
  });

  it('bench-model: size from the model config, else 256', () => {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'bodies-'));
    fs.mkdirSync(path.join(root, 'models', 'bench'), { recursive: true });
    fs.writeFileSync(
      path.join(root, 'models', 'bench', 'config.json'),
      JSON.stringify({ inputs: [{ name: 'x', dtype: 'float32', shape: [4, 8] }] }),
    );
    expect(modelInputSize(root, 'bench')).toBe(32);
    expect(modelInputSize(root, 'missing')).toBeUndefined();
    const a = JSON.parse(bodyFactory('bench-model', 0, { repoRoot: root })(1)) as {
      model: string;
      input: number[];
    };
    expect(a.model).toBe('bench');
    expect(a.input).toHaveLength(32);
    const b = JSON.parse(bodyFactory('bench-model', 0, { repoRoot: path.join(root, 'nope') })(1)) as {
      input: number[];
    };
    expect(b.input).toHaveLength(256);
    fs.rmSync(root, { recursive: true, force: true });
  });

  it('text: the {"text": ...} shape for the upper model', () => {
    const a = JSON.parse(bodyFactory('text', 2)(9)) as { id: number; model: string; text: string };
    expect(a).toMatchObject({ id: 9, model: 'upper' });
    expect(typeof a.text).toBe('string');
    expect(a.text.length).toBeGreaterThan(0);
  });

  it('rejects unknown kinds and lists the known ones', () => {
    expect(() => bodyFactory('nope', 0)).toThrow(/echo-floats/);
    expect(Object.keys(BODY_KINDS).sort()).toEqual(['bench-model', 'digits', 'echo-floats', 'text']);
  });

  it('prng is deterministic and in [0, 1)', () => {
    const a = prng(1);
    const b = prng(1);
    for (let i = 0; i < 100; i++) {
      const x = a();
      expect(x).toBe(b());
      expect(x >= 0 && x < 1).toBe(true);
    }
  });
});

describe('echoAnswer (bare echo server)', () => {
  it('answers with the real server response shape', () => {
    expect(JSON.parse(echoAnswer('{"id":7,"model":"echo","input":[1.5,2]}'))).toEqual({
      id: 7,
      model: 'echo',
      version: '1',
      result: [1.5, 2],
      latency_ms: 0,
    });
    expect(JSON.parse(echoAnswer('{"id":"a","text":"hi"}'))).toMatchObject({
      id: 'a',
      model: 'echo',
      result: 'hi',
    });
  });

  it('answers typed errors for bad requests', () => {
    expect(JSON.parse(echoAnswer('{nope'))).toMatchObject({ id: null, type: 'error', code: 'bad_request' });
    expect(JSON.parse(echoAnswer('[1]'))).toMatchObject({ type: 'error', code: 'bad_request' });
    expect(JSON.parse(echoAnswer('{"id":3}'))).toMatchObject({ id: 3, type: 'error', code: 'bad_request' });
  });
});
