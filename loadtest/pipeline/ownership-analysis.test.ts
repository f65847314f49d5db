import {
  effectCounts,
  failoverOf,
  ownerAt,
  parseWorkerLine,
  spreadOf,
  throughputOf,
  type WorkerRecord,
} from './ownership-analysis';

const e = (instance: string, partition: number, seq: number, atMs: number): WorkerRecord => ({
  instance,
  kind: 'E',
  partition,
  seq,
  atMs,
});

describe('worker lines', () => {
  it('parses effects, fences and ownership changes, and nothing else', () => {
    expect(parseWorkerLine('a', 'E 2 17 1000')).toEqual(e('a', 2, 17, 1000));
    expect(parseWorkerLine('a', 'F 0 5 1200')?.kind).toBe('F');
    expect(parseWorkerLine('a', 'O 3 1300 +')).toEqual({
      instance: 'a',
      kind: 'G',
      partition: 3,
      seq: 0,
      atMs: 1300,
    });
    expect(parseWorkerLine('a', 'O 3 1300 -')?.kind).toBe('L');
    expect(parseWorkerLine('a', 'R 1000')).toBeUndefined();
    expect(parseWorkerLine('a', 'E 1 x 1')).toBeUndefined();
  });
});

describe('failover', () => {
  const records: WorkerRecord[] = [
    e('a', 0, 1, 900),
    e('b', 1, 2, 950),
    e('a', 0, 3, 990),
    // the fault at 1000; b's first effect on partition 0 at 4000
    e('b', 0, 5, 4000),
    e('b', 1, 6, 4100),
    // a wakes (a stall): one effect not fenced, one fenced, then a takes partition 0 back
    e('a', 0, 7, 4500),
    { instance: 'a', kind: 'F', partition: 0, seq: 8, atMs: 4600 },
    { instance: 'a', kind: 'G', partition: 0, seq: 0, atMs: 5000 },
    e('a', 0, 9, 5100),
  ];

  it('finds the owner and the victim’s partitions', () => {
    expect(ownerAt(records, 0, 999)).toBe('a');
    expect(ownerAt(records, 1, 999)).toBe('b');
    expect(ownerAt(records, 2, 999)).toBeNull();
  });

  it('measures last old → first new, and the deposed owner’s effects until it regains the partition', () => {
    expect(failoverOf(records, 'a', 1000)).toEqual([
      {
        partition: 0,
        newOwner: 'b',
        lastOldMs: 990,
        firstNewMs: 4000,
        failoverMs: 3010,
        sinceFaultMs: 3000,
        deposedEffects: 1,
        fenced: 1,
      },
    ]);
  });

  it('says when no new owner came', () => {
    const [p] = failoverOf([e('a', 0, 1, 990)], 'a', 1000);
    expect(p?.firstNewMs).toBeNull();
    expect(p?.failoverMs).toBeNull();
  });
});

describe('effects', () => {
  it('counts lost, duplicated across instances and repeated effects', () => {
    const records = [e('a', 0, 1, 1), e('b', 0, 1, 2), e('a', 0, 2, 3), e('a', 0, 2, 4), e('a', 0, 3, 5)];
    expect(effectCounts(records, [1, 2, 3, 4])).toEqual({
      published: 4,
      effected: 3,
      lost: 1,
      duplicatesAcrossInstances: 1,
      repeatedEffects: 2,
    });
  });

  it('gives throughput from the release to the last effect, and the spread of partitions', () => {
    const records = [e('a', 0, 1, 1000), e('a', 1, 2, 1500), e('b', 2, 3, 2000), e('a', 2, 4, 2000)];
    expect(throughputOf(records, 1000)).toBe(4);
    expect(throughputOf([], 1000)).toBeNull();
    // partition 2 is a tie: the first id in order wins
    expect(spreadOf(records)).toEqual({ a: 3 });
  });
});
