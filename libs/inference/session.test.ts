import * as path from 'node:path';
import { DeviceError, type GpuProviderName } from '../device';
import { parseSignature } from '../protocol';
import { usesNativeUws } from '../uws';
import { availableBackends, compareSignature, type LoadedSession, loadSession, ortMessage } from './index';

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

  // What a strict cuda:0 / webgpu:0 load does on this host decides what auto must do: the same assertions hold on
  // a CPU-only host (both fail, auto runs on CPU and says why) and on a GPU host (auto takes the first that works).
  const strict = async (provider: GpuProviderName): Promise<LoadedSession | DeviceError> => {
    try {
      return await loadSession(UPPER, { device: { kind: provider, deviceId: 0 }, intraOpThreads: 1 });
    } catch (error) {
      return error as DeviceError;
    }
  };
  const LABEL = { cuda: 'CUDA', webgpu: 'WebGPU' } as const;

  test.each(['cuda', 'webgpu'] as const)(
    '%s is strict: it runs there or fails with a DeviceError naming the device, never silently on CPU',
    async (provider) => {
      const outcome = await strict(provider);
      if (outcome instanceof Error) {
        expect(outcome).toBeInstanceOf(DeviceError);
        expect(outcome.message).toMatch(
          new RegExp(`^${LABEL[provider]} session failed \\(${provider}:0: \\S`),
        );
        // The operator reads what happened, not ONNX Runtime's source location.
        expect(outcome.message).not.toMatch(/onnxruntime_src/);
      } else {
        expect(availableBackends()).toContain(provider);
        expect(outcome.executionProvider).toBe(provider);
        expect(outcome.fallbackReason).toBeUndefined();
        await outcome.session.release();
      }
    },
  );

  test('auto runs on the first of CUDA, WebGPU that a strict load runs on, and says why when it runs on CPU', async () => {
    const works: GpuProviderName[] = [];
    for (const provider of ['cuda', 'webgpu'] as const) {
      const outcome = await strict(provider);
      if (!(outcome instanceof Error)) {
        works.push(provider);
        await outcome.session.release();
      }
    }
    const loaded = await loadSession(UPPER, { device: { kind: 'auto', deviceId: 0 }, intraOpThreads: 1 });
    expect(loaded.executionProvider).toBe(works[0] ?? 'cpu');
    if (works[0] === 'cuda') expect(loaded.fallbackReason).toBeUndefined();
    else expect(loaded.fallbackReason).toMatch(/^cuda:0: /);
    if (works.length === 0) expect(loaded.fallbackReason).toMatch(/; webgpu:0: \S/);
    await loaded.session.release();
  });

  test('ortMessage keeps what happened and drops the source location of a failed check', () => {
    const failed = new Error(
      '/onnxruntime_src/onnxruntime/core/providers/webgpu/webgpu_context.cc:136 onnxruntime::webgpu::' +
        'WebGpuContext::Initialize(const onnxruntime::webgpu::WebGpuContextConfig&)::<lambda()> ' +
        'adapter_result.status == wgpu::RequestAdapterStatus::Success was false. ' +
        'Failed to get a WebGPU adapter: No supported adapters\n',
    );
    expect(ortMessage(failed)).toBe('Failed to get a WebGPU adapter: No supported adapters');
    expect(ortMessage(new Error('Failed to load shared library'))).toBe('Failed to load shared library');
    expect(ortMessage('plain')).toBe('plain');
    // The binding's errors can come from another realm: not instanceof Error, still a message.
    expect(ortMessage({ message: failed.message })).toBe(
      'Failed to get a WebGPU adapter: No supported adapters',
    );
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
