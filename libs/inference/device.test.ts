import {
  DeviceError,
  defaultIntraOpThreads,
  devicesForNodes,
  formatDevice,
  parseDevice,
  planProviders,
} from './device';

describe('parseDevice', () => {
  test.each([
    ['cpu', { kind: 'cpu' }],
    ['CPU', { kind: 'cpu' }],
    ['auto', { kind: 'auto', deviceId: 0 }],
    ['cuda', { kind: 'cuda', deviceId: 0 }],
    ['cuda:3', { kind: 'cuda', deviceId: 3 }],
  ])('%s', (text, expected) => {
    expect(parseDevice(text)).toEqual(expected);
  });
  test.each(['gpu', 'cuda:', 'cuda:x', 'cuda:1:2', ''])('rejects %p', (text) => {
    expect(() => parseDevice(text)).toThrow(DeviceError);
  });
  test('formats back', () => {
    expect(formatDevice(parseDevice('cuda:2'))).toBe('cuda:2');
  });
});

describe('devicesForNodes', () => {
  test('one device repeats for every node', () => {
    expect(devicesForNodes('cpu', 3)).toHaveLength(3);
  });
  test('a list gives each node its own GPU', () => {
    expect(devicesForNodes('cuda:0,cuda:1', 2)).toEqual([
      { kind: 'cuda', deviceId: 0 },
      { kind: 'cuda', deviceId: 1 },
    ]);
  });
  test('a list of the wrong length is refused', () => {
    expect(() => devicesForNodes('cuda:0,cuda:1', 3)).toThrow(/2 devices for 3 nodes/);
  });
});

describe('planProviders (the CUDA/CPU selection)', () => {
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
  test('auto tries CUDA then falls back to CPU', () => {
    expect(planProviders({ kind: 'auto', deviceId: 0 }, ['cpu', 'cuda'])).toEqual({
      attempts: [
        { provider: 'cuda', deviceId: 0 },
        { provider: 'cpu', deviceId: 0 },
      ],
      strict: false,
    });
    expect(planProviders({ kind: 'auto', deviceId: 0 }, ['cpu'])).toEqual({
      attempts: [{ provider: 'cpu', deviceId: 0 }],
      strict: false,
    });
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
