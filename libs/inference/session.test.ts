import * as path from 'node:path';
import { parseSignature } from '../protocol';
import { availableBackends, compareSignature, loadSession } from './index';
import { usesNativeUws } from './uws-check';

const MODELS = path.resolve(__dirname, '../../../models');

describe('loadSession on this host', () => {
  test('cpu loads and reports the provider it got', async () => {
    const loaded = await loadSession(path.join(MODELS, 'upper/1/model.onnx'), {
      device: { kind: 'cpu' },
      intraOpThreads: 1,
    });
    expect(loaded.executionProvider).toBe('cpu');
    expect(loaded.fallbackReason).toBeUndefined();
    await loaded.session.release();
  });

  test('auto falls back to CPU visibly when CUDA cannot be used', async () => {
    const loaded = await loadSession(path.join(MODELS, 'upper/1/model.onnx'), {
      device: { kind: 'auto', deviceId: 0 },
      intraOpThreads: 1,
    });
    expect(loaded.executionProvider).toBe('cpu');
    if (availableBackends().includes('cuda')) expect(loaded.fallbackReason).toMatch(/cuda/);
    await loaded.session.release();
  });

  test('cuda fails fast on a host without a usable GPU', async () => {
    await expect(
      loadSession(path.join(MODELS, 'upper/1/model.onnx'), {
        device: { kind: 'cuda', deviceId: 0 },
        intraOpThreads: 1,
      }),
    ).rejects.toThrow(/CUDA|cuda/);
  });

  test('compareSignature catches a config that does not match the file', async () => {
    const loaded = await loadSession(path.join(MODELS, 'upper/1/model.onnx'), {
      device: { kind: 'cpu' },
      intraOpThreads: 1,
    });
    const right = parseSignature(
      {
        inputs: [{ name: 'text', dtype: 'string', shape: [] }],
        outputs: [{ name: 'text_out', dtype: 'string', shape: [] }],
      },
      'x',
    );
    expect(compareSignature(right, loaded.session)).toEqual([]);
    const wrong = parseSignature(
      {
        inputs: [{ name: 'text', dtype: 'float32', shape: [4] }],
        outputs: [{ name: 'nope', dtype: 'string', shape: [] }],
      },
      'x',
    );
    const problems = compareSignature(wrong, loaded.session);
    expect(problems.join('\n')).toMatch(/float32/);
    expect(problems.join('\n')).toMatch(/rank/);
    expect(problems.join('\n')).toMatch(/"nope"/);
    await loaded.session.release();
  });

  test('uWebSockets.js native binary is in use here', () => {
    expect(usesNativeUws()).toBe(true);
  });
});
