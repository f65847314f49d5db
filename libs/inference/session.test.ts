import * as path from 'node:path';
import { parseSignature } from '../protocol';
import { availableBackends, compareSignature, DeviceError, type LoadedSession, loadSession } from './index';
import { usesNativeUws } from './uws-check';

const MODELS = path.resolve(__dirname, '../../../models');
const UPPER = path.join(MODELS, 'upper/1/model.onnx');

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

  // What a strict cuda:0 load does on this host decides what auto must do: the same assertions hold on a
  // CPU-only host (CUDA fails, auto runs on CPU and says why) and on a GPU host (both run on CUDA).
  const strictCuda = async (): Promise<LoadedSession | DeviceError> => {
    try {
      return await loadSession(UPPER, { device: { kind: 'cuda', deviceId: 0 }, intraOpThreads: 1 });
    } catch (error) {
      return error as DeviceError;
    }
  };

  test('cuda is strict: it runs on CUDA or fails with a DeviceError, never silently on CPU', async () => {
    const outcome = await strictCuda();
    if (outcome instanceof Error) {
      expect(outcome).toBeInstanceOf(DeviceError);
      expect(outcome.message).toMatch(/CUDA/);
    } else {
      expect(availableBackends()).toContain('cuda');
      expect(outcome.executionProvider).toBe('cuda');
      expect(outcome.fallbackReason).toBeUndefined();
      await outcome.session.release();
    }
  });

  test('auto runs on CUDA exactly when a strict CUDA load works, and says why when it runs on CPU', async () => {
    const strict = await strictCuda();
    const cudaWorks = !(strict instanceof Error);
    if (!(strict instanceof Error)) await strict.session.release();
    const loaded = await loadSession(UPPER, { device: { kind: 'auto', deviceId: 0 }, intraOpThreads: 1 });
    expect(loaded.executionProvider).toBe(cudaWorks ? 'cuda' : 'cpu');
    if (cudaWorks) expect(loaded.fallbackReason).toBeUndefined();
    else expect(loaded.fallbackReason).toMatch(/^cuda:0: /);
    await loaded.session.release();
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
