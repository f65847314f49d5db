import { DeviceError } from './errors';
import { defaultIntraOpThreads, planProviders } from './providers';

const BUNDLED = ['cpu', 'webgpu', 'cuda', 'tensorrt']; // what onnxruntime-node 1.30 lists

describe('planProviders (the CUDA/WebGPU/CPU selection)', () => {
  test('cpu never tries CUDA', () => {
    expect(planProviders({ kind: 'cpu' }, ['cpu', 'cuda'])).toEqual({
      attempts: [{ provider: 'cpu', deviceId: 0 }],
      strict: true,
    });
  });
  test('cuda is strict: fails fast when the binding has no CUDA backend', () => {
    expect(() => planProviders({ kind: 'cuda', deviceId: 0 }, ['cpu'])).toThrow(DeviceError);
    expect(planProviders({ kind: 'cuda', deviceId: 1 }, ['cpu', 'cuda'])).toEqual({
      attempts: [{ provider: 'cuda', deviceId: 1 }],
      strict: true,
    });
  });
  test('auto tries CUDA, then WebGPU, then falls back to CPU', () => {
    expect(planProviders({ kind: 'auto', deviceId: 0 }, BUNDLED)).toEqual({
      attempts: [
        { provider: 'cuda', deviceId: 0 },
        { provider: 'webgpu', deviceId: 0 },
        { provider: 'cpu', deviceId: 0 },
      ],
      strict: false,
    });
  });
  test('auto skips a backend the binding lacks, and says why', () => {
    expect(planProviders({ kind: 'auto', deviceId: 0 }, ['cpu', 'cuda'])).toEqual({
      attempts: [
        { provider: 'cuda', deviceId: 0 },
        { provider: 'cpu', deviceId: 0 },
      ],
      strict: false,
      fallbackReason: 'webgpu:0: this onnxruntime-node build has no WebGPU backend',
    });
    expect(planProviders({ kind: 'auto', deviceId: 0 }, ['cpu', 'webgpu']).attempts).toEqual([
      { provider: 'webgpu', deviceId: 0 },
      { provider: 'cpu', deviceId: 0 },
    ]);
  });
  test('auto without any GPU backend runs on CPU and says why for each', () => {
    expect(planProviders({ kind: 'auto', deviceId: 0 }, ['cpu'])).toEqual({
      attempts: [{ provider: 'cpu', deviceId: 0 }],
      strict: false,
      fallbackReason:
        'cuda:0: this onnxruntime-node build has no CUDA backend; ' +
        'webgpu:0: this onnxruntime-node build has no WebGPU backend',
    });
  });
  test('webgpu is strict, like cuda', () => {
    expect(planProviders({ kind: 'webgpu', deviceId: 0 }, BUNDLED)).toEqual({
      attempts: [{ provider: 'webgpu', deviceId: 0 }],
      strict: true,
    });
    expect(() => planProviders({ kind: 'webgpu', deviceId: 0 }, ['cpu', 'cuda'])).toThrow(
      new DeviceError('--device webgpu:0: this onnxruntime-node build has no WebGPU backend'),
    );
  });
  test('webgpu:N past the default adapter fails naming the device: the binding cannot pick an adapter', () => {
    const attempt = (): unknown => planProviders({ kind: 'webgpu', deviceId: 1 }, BUNDLED);
    expect(attempt).toThrow(DeviceError);
    expect(attempt).toThrow(
      '--device webgpu:1: this onnxruntime-node build opens only the default WebGPU adapter (webgpu:0)',
    );
  });
  test('cuda:N without a CUDA backend names the device it was asked for', () => {
    expect(() => planProviders({ kind: 'cuda', deviceId: 3 }, ['cpu'])).toThrow(
      '--device cuda:3: this onnxruntime-node build has no CUDA backend',
    );
  });
  test('intra-op threads share the cores between workers', () => {
    expect(defaultIntraOpThreads(2, 1)).toBe(1);
    expect(defaultIntraOpThreads(2, 2)).toBe(1);
    expect(defaultIntraOpThreads(4, 1)).toBe(3);
    expect(defaultIntraOpThreads(16, 1)).toBe(15);
    expect(defaultIntraOpThreads(16, 2, 2)).toBe(3);
    expect(defaultIntraOpThreads(1, 1)).toBe(1);
  });
});
