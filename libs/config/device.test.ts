import {
  devicesPerNode,
  formatDeviceList,
  formatDeviceTarget,
  parseDeviceEntry,
  parseDeviceList,
  resolveConfig,
} from './index';

describe('device parsing', () => {
  it.each([
    ['cpu', { kind: 'cpu' }],
    ['auto', { kind: 'auto', deviceId: 0 }],
    ['cuda', { kind: 'cuda', deviceId: 0 }],
    ['cuda:0', { kind: 'cuda', deviceId: 0 }],
    ['cuda:3', { kind: 'cuda', deviceId: 3 }],
    [' CUDA:12 ', { kind: 'cuda', deviceId: 12 }],
    ['Cpu', { kind: 'cpu' }],
    ['webgpu', { kind: 'webgpu', deviceId: 0 }],
    ['webgpu:0', { kind: 'webgpu', deviceId: 0 }],
    [' WebGPU:2 ', { kind: 'webgpu', deviceId: 2 }],
    ['webgpu:255', { kind: 'webgpu', deviceId: 255 }],
  ])('parses %j', (text, expected) => {
    expect(parseDeviceEntry(text)).toEqual(expected);
  });

  it.each([
    '',
    'gpu',
    'cuda:',
    'cuda:-1',
    'cuda:1.5',
    'cuda:x',
    'cuda:256',
    'cuda:1000',
    'cuda 1',
    'cpu:0',
    'auto:1',
    'webgpu:',
    'webgpu:-1',
    'webgpu:256',
    'webgpu:x',
    'web-gpu',
    'wgpu',
    'webgpu0',
    'webgpu:0:1',
  ])('rejects %j', (text) => {
    expect(parseDeviceEntry(text)).toBeUndefined();
  });

  it('parses comma lists and rejects lists with a bad entry', () => {
    expect(parseDeviceList('cuda:0, cuda:1')).toEqual([
      { kind: 'cuda', deviceId: 0 },
      { kind: 'cuda', deviceId: 1 },
    ]);
    expect(parseDeviceList('cpu,cuda')).toEqual([{ kind: 'cpu' }, { kind: 'cuda', deviceId: 0 }]);
    expect(parseDeviceList('webgpu:0,cpu')).toEqual([{ kind: 'webgpu', deviceId: 0 }, { kind: 'cpu' }]);
    expect(parseDeviceList('cuda:0,webgpu')).toEqual([
      { kind: 'cuda', deviceId: 0 },
      { kind: 'webgpu', deviceId: 0 },
    ]);
    expect(parseDeviceList('webgpu:0,gpu')).toBeUndefined();
    expect(parseDeviceList('cuda:0,')).toBeUndefined();
    expect(parseDeviceList('cuda:0,,cuda:1')).toBeUndefined();
  });

  it('formats canonically', () => {
    expect(formatDeviceTarget({ kind: 'cuda', deviceId: 2 })).toBe('cuda:2');
    expect(formatDeviceTarget({ kind: 'auto', deviceId: 0 })).toBe('auto');
    expect(formatDeviceList(parseDeviceList(' CUDA , cpu ')!)).toBe('cuda:0,cpu');
    expect(formatDeviceTarget({ kind: 'webgpu', deviceId: 1 })).toBe('webgpu:1');
    expect(formatDeviceList(parseDeviceList('WEBGPU,cpu')!)).toBe('webgpu:0,cpu');
  });

  it('assigns devices to nodes', () => {
    expect(devicesPerNode([{ kind: 'cpu' }], 3)).toEqual([{ kind: 'cpu' }, { kind: 'cpu' }, { kind: 'cpu' }]);
    const two = parseDeviceList('cuda:0,cuda:1')!;
    expect(devicesPerNode(two, 2)).toEqual(two);
    expect(devicesPerNode(two, 3)).toBeUndefined();
    expect(devicesPerNode(two, 1)).toBeUndefined();
  });

  it('gives each of two nodes its own cpu from cpu,cpu', () => {
    expect(devicesPerNode(parseDeviceList('cpu,cpu')!, 2)).toEqual([{ kind: 'cpu' }, { kind: 'cpu' }]);
  });
});

describe('the device setting at start (the one parser: config validates, the supervisor hands each node its own)', () => {
  it('--nodes 2 --device cuda:0,cuda:1: node i gets cuda:i', () => {
    const config = resolveConfig({ flags: { nodes: 2, device: 'cuda:0,cuda:1' } });
    expect(config.devices).toEqual([
      { kind: 'cuda', deviceId: 0 },
      { kind: 'cuda', deviceId: 1 },
    ]);
  });

  it('--nodes 2 --device webgpu:0,cpu: node 0 on the WebGPU adapter, node 1 on cpu', () => {
    const config = resolveConfig({ flags: { nodes: 2, device: 'WebGPU,cpu' } });
    expect(config.device).toBe('webgpu:0,cpu');
    expect(config.devices).toEqual([{ kind: 'webgpu', deviceId: 0 }, { kind: 'cpu' }]);
  });

  it('a malformed webgpu entry names the setting, its source and what it accepts', () => {
    expect(() => resolveConfig({ flags: { device: 'webgpu:256' } })).toThrow(
      /invalid value "webgpu:256" for --device \(command-line flag\): expected .*webgpu\[:N\]/,
    );
  });

  it('--nodes 2 --device cpu,cpu resolves to one cpu per node', () => {
    const config = resolveConfig({ flags: { nodes: 2, device: 'cpu,cpu' } });
    expect(config.device).toBe('cpu,cpu');
    expect(config.devices).toEqual([{ kind: 'cpu' }, { kind: 'cpu' }]);
  });

  it.each([1, 3])('--device cpu,cpu with --nodes %d fails naming the setting', (nodes) => {
    expect(() => resolveConfig({ flags: { nodes, device: 'cpu,cpu' } })).toThrow(
      `invalid value "cpu,cpu" for --device (command-line flag): it lists 2 devices but nodes is ${nodes}`,
    );
  });

  it('an unknown device names the setting and its source', () => {
    expect(() => resolveConfig({ env: { STREAMINFER_DEVICE: 'cpu,gpu' } })).toThrow(/STREAMINFER_DEVICE/);
  });
});
