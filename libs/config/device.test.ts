import {
  devicesPerNode,
  formatDeviceList,
  formatDeviceTarget,
  parseDeviceEntry,
  parseDeviceList,
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
  ])('rejects %j', (text) => {
    expect(parseDeviceEntry(text)).toBeUndefined();
  });

  it('parses comma lists and rejects lists with a bad entry', () => {
    expect(parseDeviceList('cuda:0, cuda:1')).toEqual([
      { kind: 'cuda', deviceId: 0 },
      { kind: 'cuda', deviceId: 1 },
    ]);
    expect(parseDeviceList('cpu,cuda')).toEqual([{ kind: 'cpu' }, { kind: 'cuda', deviceId: 0 }]);
    expect(parseDeviceList('cuda:0,')).toBeUndefined();
    expect(parseDeviceList('cuda:0,,cuda:1')).toBeUndefined();
  });

  it('formats canonically', () => {
    expect(formatDeviceTarget({ kind: 'cuda', deviceId: 2 })).toBe('cuda:2');
    expect(formatDeviceTarget({ kind: 'auto', deviceId: 0 })).toBe('auto');
    expect(formatDeviceList(parseDeviceList(' CUDA , cpu ')!)).toBe('cuda:0,cpu');
  });

  it('assigns devices to nodes', () => {
    expect(devicesPerNode([{ kind: 'cpu' }], 3)).toEqual([{ kind: 'cpu' }, { kind: 'cpu' }, { kind: 'cpu' }]);
    const two = parseDeviceList('cuda:0,cuda:1')!;
    expect(devicesPerNode(two, 2)).toEqual(two);
    expect(devicesPerNode(two, 3)).toBeUndefined();
    expect(devicesPerNode(two, 1)).toBeUndefined();
  });
});
