import { createHash } from 'node:crypto';
import { digestHex, modelObject } from './artifacts';
import { FleetError } from './errors';
import { parseHostStepRequest } from './host-steps';
import { type FleetRecord, fleetNames, type HostBeat, parseFleetRecord, parseHostBeat } from './records';

const record: FleetRecord = {
  format: 1,
  epoch: 3,
  table: {
    models: [{ name: 'digits', versions: ['1', '2'], stable: '1', candidate: '2', canaryPercent: 10 }],
    defaultModel: 'digits',
  },
  reloadId: 'r-1',
  reason: 'canary digits 10',
  strategy: 'atomic',
  committedBy: 'host-a',
  committedAt: '2026-01-01T00:00:00.000Z',
};

const beat: HostBeat = {
  host: 'host-a',
  address: 'http://10.0.0.1:8000',
  epoch: 3,
  ready: true,
  fenced: false,
  defaultModel: 'digits',
  models: [{ name: 'digits', stable: '1', candidate: '2', canaryPercent: 10, shadow: false }],
  nodes: 2,
  nodesReady: 2,
  requestsPerSecond: 12.5,
  startedAt: '2026-01-01T00:00:00.000Z',
  beatAt: '2026-01-01T00:00:01.000Z',
};

function code(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    return err instanceof FleetError ? err.code : `untyped ${String(err)}`;
  }
  return 'no error';
}

describe('fleet records', () => {
  it('reads back a valid record unchanged, and drops per-host settings from its table', () => {
    expect(parseFleetRecord(JSON.parse(JSON.stringify(record)))).toEqual(record);
    const withSettings = { ...record, table: { ...record.table, settings: { logLevel: 'debug' } } };
    expect(parseFleetRecord(withSettings).table).toEqual(record.table);
  });

  it('reads a format-1 record (before membership) without members, and a format-2 one with them, sorted', () => {
    expect(parseFleetRecord(JSON.parse(JSON.stringify(record)))).not.toHaveProperty('members');
    const withMembers = { ...record, format: 2, members: ['host-b', 'host-a'] };
    expect(parseFleetRecord(withMembers)).toEqual({ ...record, format: 2, members: ['host-a', 'host-b'] });
  });

  it.each([
    ['another format', { ...record, format: 3 }],
    ['format 2 without members', { ...record, format: 2 }],
    ['members not host ids', { ...record, format: 2, members: ['a', 'b c'] }],
    ['a member twice', { ...record, format: 2, members: ['a', 'a'] }],
    ['members not an array', { ...record, format: 2, members: 'a' }],
    ['a negative epoch', { ...record, epoch: -1 }],
    ['a fractional epoch', { ...record, epoch: 1.5 }],
    ['a string epoch', { ...record, epoch: '3' }],
    ['no table', { ...record, table: undefined }],
    ['models not an array', { ...record, table: { models: {}, defaultModel: 'digits' } }],
    [
      'a model without stable',
      { ...record, table: { models: [{ name: 'x', versions: [] }], defaultModel: 'x' } },
    ],
    [
      'a canary of 150 %',
      { ...record, table: { ...record.table, models: [{ ...record.table.models[0], canaryPercent: 150 }] } },
    ],
    ['a bad time', { ...record, committedAt: 'yesterday' }],
    ['null', null],
    ['an array', [record]],
  ])('rejects %s with invalid_record', (_what, value) => {
    expect(code(() => parseFleetRecord(value))).toBe('invalid_record');
  });

  it('checks heartbeats', () => {
    expect(parseHostBeat(JSON.parse(JSON.stringify(beat)))).toEqual(beat);
    expect(code(() => parseHostBeat({ ...beat, host: 'a.b' }))).toBe('invalid_record');
    expect(code(() => parseHostBeat({ ...beat, requestsPerSecond: Number.NaN }))).toBe('invalid_record');
    expect(code(() => parseHostBeat({ ...beat, models: [{ name: 'x' }] }))).toBe('invalid_record');
  });

  it('names the resources of a fleet, and refuses names that would break a bucket or subject', () => {
    const names = fleetNames('blue-1');
    expect(names).toMatchObject({
      registryBucket: 'streaminfer_fleet_blue-1',
      hostsBucket: 'streaminfer_fleet_blue-1_hosts',
      leaseBucket: 'streaminfer_fleet_blue-1_lease',
      modelsBucket: 'streaminfer_models_blue-1',
    });
    expect(names.hostSubject('h_2')).toBe('streaminfer.fleet.blue-1.host.h_2');
    expect(code(() => fleetNames('a.b'))).toBe('invalid_options');
    expect(code(() => fleetNames('x'.repeat(33)))).toBe('invalid_options');
    expect(code(() => fleetNames(''))).toBe('invalid_options');
    expect(code(() => names.hostSubject('h*'))).toBe('invalid_options');
    expect(code(() => names.hostSubject('h'.repeat(65)))).toBe('invalid_options');
  });
});

describe('host step requests', () => {
  const bytes = (value: unknown) => new TextEncoder().encode(JSON.stringify(value));

  it('accepts the five steps and checks plan and epoch', () => {
    expect(
      parseHostStepRequest(bytes({ step: 'commit', reloadId: 'r', epoch: 4, plan: record.table })),
    ).toEqual({
      step: 'commit',
      reloadId: 'r',
      epoch: 4,
      plan: record.table,
    });
    expect(code(() => parseHostStepRequest(bytes({ step: 'drop', reloadId: 'r' })))).toBe('invalid_record');
    expect(code(() => parseHostStepRequest(bytes({ step: 'abort' })))).toBe('invalid_record');
    expect(code(() => parseHostStepRequest(bytes({ step: 'roll', reloadId: 'r', epoch: -2 })))).toBe(
      'invalid_record',
    );
    expect(code(() => parseHostStepRequest(new TextEncoder().encode('{')))).toBe('invalid_record');
  });
});

describe('artifact names and digests', () => {
  it('reads the store digest as hex, in base64url (what nats.js writes) or hex form', () => {
    const hash = createHash('sha256').update('model bytes').digest();
    expect(digestHex(`SHA-256=${hash.toString('base64url')}=`)).toBe(hash.toString('hex'));
    expect(digestHex(`SHA-256=${hash.toString('base64url')}`)).toBe(hash.toString('hex'));
    expect(digestHex(`SHA-256=${hash.toString('hex').toUpperCase()}`)).toBe(hash.toString('hex'));
    expect(digestHex(`SHA-512=${hash.toString('base64url')}`)).toBeUndefined();
    expect(digestHex('SHA-256=abc')).toBeUndefined();
  });

  it('refuses model names and versions that would leave the model directory', () => {
    expect(modelObject('digits', '2')).toBe('digits/2/model.onnx');
    expect(code(() => modelObject('..', '2'))).toBe('invalid_options');
    expect(code(() => modelObject('digits', '../x'))).toBe('invalid_options');
  });
});
