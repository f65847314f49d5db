import type { FleetRecord } from './';
import { onlyMembersMoved, rollCall, withMember, withoutMember } from './fleet-membership';

const record: FleetRecord = {
  format: 2,
  epoch: 4,
  members: ['a', 'b', 'c'],
  table: { defaultModel: 'digits', models: [{ name: 'digits', versions: ['1'], stable: '1' }] },
  reloadId: 'r4',
  reason: 'canary digits 10',
  strategy: 'atomic',
  committedBy: 'a',
  committedAt: '2026-12-01T00:00:00.000Z',
};

describe('rollCall: who must PREPARE', () => {
  test('members that heartbeat are live, the others down; a heartbeat of a non-member is a stranger', () => {
    expect(rollCall(['a', 'b', 'c'], ['ghost', 'a', 'c'], 'a')).toEqual({
      live: ['a', 'c'],
      down: ['b'],
      strangers: ['ghost'],
    });
  });

  test('this host is always live (its own heartbeat may not be written yet)', () => {
    expect(rollCall(['a', 'b'], ['b'], 'a')).toEqual({ live: ['a', 'b'], down: [], strangers: [] });
  });

  test('a host excluded but still beating is a stranger, not asked', () => {
    expect(rollCall(['a'], ['a', 'b'], 'a')).toEqual({ live: ['a'], down: [], strangers: ['b'] });
  });

  test('a format-1 record (no members yet): every heartbeat counts, as before', () => {
    expect(rollCall(undefined, ['c', 'b'], 'a')).toEqual({ live: ['a', 'b', 'c'], down: [], strangers: [] });
  });
});

describe('membership edits', () => {
  test('join and leave keep the list sorted; null when nothing changes', () => {
    expect(withMember(['a', 'c'], 'b')).toEqual(['a', 'b', 'c']);
    expect(withMember(['a', 'b'], 'b')).toBeNull();
    expect(withMember(undefined, 'a')).toEqual(['a']);
    expect(withoutMember(['a', 'b', 'c'], 'b')).toEqual(['a', 'c']);
    expect(withoutMember(['a'], 'b')).toBeNull();
    expect(withoutMember(undefined, 'a')).toBeNull();
  });

  test('onlyMembersMoved: a join since the read lets a change commit on top; any other write does not', () => {
    expect(onlyMembersMoved(record, { ...record, members: ['a', 'b', 'c', 'd'] })).toBe(true);
    expect(onlyMembersMoved({ ...record, format: 1, members: undefined }, record)).toBe(true);
    const { committedAt, ...rest } = record;
    const reordered: FleetRecord = { committedAt, ...rest, members: ['a'] };
    expect(onlyMembersMoved(record, reordered)).toBe(true);
    expect(onlyMembersMoved(record, { ...record, epoch: 5, reloadId: 'r5' })).toBe(false);
    expect(onlyMembersMoved(record, { ...record, table: { ...record.table, defaultModel: 'other' } })).toBe(
      false,
    );
  });
});
