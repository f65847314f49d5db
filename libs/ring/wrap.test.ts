/** The ring across its end (tail skips, exact fits, positions and sequences past 2^32) and waiting for data or space. */
import { RingBuffer } from './index';
import { drain, header, L, payload, write } from './ring.test-util';

describe('wrap-around', () => {
  test('a record that exactly fills the tail is not wrapped', () => {
    const ring = RingBuffer.create(1024);
    write(ring, 300, 0); // 312 bytes
    write(ring, 296, 1); // 304 bytes
    drain(ring); // read = write = 616
    // tail is 1024 - 616 = 408 = recordBytes(400)
    expect(write(ring, 400, 2)).toBe(616 + 8);
    expect(ring.freeBytes()).toBe(1024 - 408);
    expect(write(ring, 100, 3)).toBe(8); // next one starts at 0, no skip
    expect(ring.wrapCount()).toBe(0);
    const got = drain(ring);
    expect(got.map((r) => [r.offset, r.length])).toEqual([
      [624, 400],
      [8, 100],
    ]);
    expect(Array.from(got[0]!.data)).toEqual(Array.from(payload(400, 2)));
    expect(Array.from(got[1]!.data)).toEqual(Array.from(payload(100, 3)));
  });

  test('a record that would straddle the end skips the tail and starts at offset 0', () => {
    const ring = RingBuffer.create(1024);
    write(ring, 300, 0);
    write(ring, 296, 1);
    drain(ring); // read = write = 616, tail 408
    expect(write(ring, 401, 2)).toBe(8); // needs 416 > 408: skip 408, record at 0
    expect(ring.wrapCount()).toBe(1);
    expect(ring.freeBytes()).toBe(1024 - 408 - 416);
    expect(ring.pendingRecords()).toBe(1);
    const got = drain(ring);
    expect(got.map((r) => [r.offset, r.length])).toEqual([[8, 401]]);
    expect(Array.from(got[0]!.data)).toEqual(Array.from(payload(401, 2)));
    expect(ring.freeBytes()).toBe(1024);
  });

  test('contiguous room is required: free bytes alone are not enough', () => {
    const ring = RingBuffer.create(1024);
    write(ring, 104, 0); // 112
    drain(ring); // pos 112
    write(ring, 500, 1); // [112, 624)
    // 512 bytes free in total, but the tail is 400 and the head before the unread record is 112.
    expect(ring.freeBytes()).toBe(512);
    expect(ring.canReserve(400)).toBe(false); // needs 408 contiguous
    expect(ring.reserve(400)).toBe(-1);
    expect(ring.tryWrite(new Uint8Array(400))).toBe(false);
    expect(ring.canReserve(392)).toBe(true); // 400 = tail exactly
    expect(drain(ring).map((r) => r.length)).toEqual([500]);
    expect(write(ring, 400, 2)).toBe(8); // now it wraps
    expect(drain(ring).map((r) => [r.offset, r.length])).toEqual([[8, 400]]);
  });

  test('when the tail is exactly one header, a zero-length record fits there', () => {
    const ring = RingBuffer.create(1024);
    write(ring, 504, 0); // [0, 512)
    write(ring, 496, 1); // [512, 1016)
    drain(ring, 1);
    // Tail of 8 bytes: a zero-length record fits (its empty payload sits at offset 1024 = capacity).
    expect(ring.reserve(0)).toBe(1024);
    ring.bytes.set(new Uint8Array(0), 1024);
    ring.commit();
    expect(ring.wrapCount()).toBe(0);
    // Anything bigger must wrap to 0.
    expect(write(ring, 1, 2)).toBe(8);
    expect(ring.wrapCount()).toBe(0); // the tail was used up, nothing skipped
    expect(drain(ring).map((r) => [r.offset, r.length])).toEqual([
      [520, 496],
      [1024, 0],
      [8, 1],
    ]);
    // A tail of 8 bytes with a 1-byte record: skipped.
    write(ring, 496, 3); // [16, 520)
    write(ring, 488, 4); // [520, 1016)
    drain(ring);
    expect(write(ring, 1, 5)).toBe(8);
    expect(ring.wrapCount()).toBe(1);
  });

  test('maxRecordBytes always fits an empty ring, at any position', () => {
    for (let start = 0; start < 1024; start += 8) {
      const ring = RingBuffer.create(1024);
      for (let at = 0; at < start; ) {
        const chunk = Math.min(start - at, 512);
        write(ring, chunk - 8, 0);
        drain(ring);
        at += chunk;
      }
      expect(ring.freeBytes()).toBe(1024);
      expect(ring.canReserve(ring.maxRecordBytes)).toBe(true);
      const off = write(ring, ring.maxRecordBytes, start);
      expect(off).toBeGreaterThan(0);
      const got = drain(ring);
      expect(got.map((r) => r.length)).toEqual([ring.maxRecordBytes]);
      expect(Array.from(got[0]!.data)).toEqual(Array.from(payload(ring.maxRecordBytes, start)));
    }
  });

  test('many random records through a small ring: FIFO, intact, with wraps', () => {
    const ring = RingBuffer.create(1024);
    let rnd = 42;
    const next = (): number => {
      rnd = (Math.imul(rnd, 1103515245) + 12345) >>> 0;
      return rnd >>> 8;
    };
    const queue: Array<[number, number]> = [];
    let seed = 0;
    let checked = 0;
    const problems: string[] = [];
    for (let step = 0; step < 20_000; step++) {
      if (next() % 3 !== 0) {
        const len = next() % 3 === 0 ? ring.maxRecordBytes - (next() % 16) : next() % 120;
        const ok = ring.tryWrite(payload(len, seed));
        if (!ok && ring.pendingRecords() === 0)
          problems.push(`step ${step}: empty ring refused ${len} bytes`);
        if (ok) queue.push([len, seed++]);
      } else {
        for (const r of drain(ring, 1 + (next() % 4))) {
          const [len, s] = queue.shift()!;
          if (r.length !== len || Buffer.compare(r.data, payload(len, s)) !== 0) {
            problems.push(
              `step ${step}: record ${s} (${len} bytes) came out as ${r.length} bytes / different`,
            );
          }
          checked++;
        }
      }
      if (ring.pendingRecords() !== queue.length)
        problems.push(`step ${step}: pending ${ring.pendingRecords()}`);
    }
    expect(problems.slice(0, 5)).toEqual([]);
    expect(checked).toBeGreaterThan(5000);
    expect(ring.wrapCount()).toBeGreaterThan(100);
  });

  test('positions and sequences wrap around 2^32', () => {
    const ring = RingBuffer.create(1024);
    const h = header(ring);
    const pos = 2 ** 32 - 1024 * 3; // offset 0, three laps before the u32 wrap
    const seq = 2 ** 32 - 50;
    for (const [i, v] of [
      [L.H_WRITE_POS, pos],
      [L.H_READ_POS, pos],
      [L.H_P_INTENT_POS, pos],
      [L.H_C_INTENT_POS, pos],
      [L.H_WRITE_SEQ, seq],
      [L.H_READ_SEQ, seq],
      [L.H_P_INTENT_SEQ, seq],
      [L.H_C_INTENT_SEQ, seq],
    ] as const) {
      h[i] = v | 0;
    }
    expect(ring.writeSequence()).toBe(seq);
    let s = 0;
    let r = 0;
    while (s < 200) {
      while (ring.tryWrite(payload(s % 90, s))) s++;
      expect(ring.pendingRecords()).toBe(s - r);
      expect(ring.freeBytes()).toBeLessThan(1024);
      for (const rec of drain(ring, 3)) {
        expect(rec.data).toEqual(payload(r % 90, r));
        r++;
      }
    }
    for (const rec of drain(ring)) expect(rec.data).toEqual(payload(r % 90, r++));
    expect(r).toBe(s);
    expect(ring.writeSequence()).toBe((seq + s) % 2 ** 32);
    expect(ring.readSequence()).toBe(ring.writeSequence());
    expect(h[L.H_WRITE_POS]! >>> 0).toBeLessThan(pos); // wrapped past 2^32
    expect(ring.pendingRecords()).toBe(0);
    expect(ring.freeBytes()).toBe(1024);
  });
});

describe('waiting', () => {
  test('waitForData resolves on commit, immediately on a stale sequence, times out otherwise', async () => {
    const ring = RingBuffer.create(1024);
    const h = header(ring);
    const seq = ring.writeSequence();
    let t0 = performance.now();
    expect(await ring.waitForData(seq, 60)).toBe('timed-out');
    expect(performance.now() - t0).toBeGreaterThanOrEqual(50);
    expect(await ring.waitForData(seq, 0)).toBe('timed-out');

    t0 = performance.now();
    const waiting = ring.waitForData(seq, 10_000);
    expect(h[L.H_WAITING_CONSUMERS]).toBe(1);
    setTimeout(() => ring.tryWrite(payload(3, 3)), 30);
    expect(await waiting).toBe('ok');
    expect(performance.now() - t0).toBeLessThan(5_000);
    expect(h[L.H_WAITING_CONSUMERS]).toBe(0);

    expect(await ring.waitForData(seq, 10_000)).toBe('ok'); // already differs
    expect(await ring.waitForData(ring.writeSequence(), 1)).toBe('timed-out');
    await expect(ring.waitForData('x' as never, 1)).rejects.toThrow(TypeError);
    await expect(ring.waitForData(0, Number.NaN)).rejects.toThrow(/timeoutMs/);
  });

  test('commit(length, false) publishes without waking; notifyConsumers() wakes', async () => {
    const ring = RingBuffer.create(1024);
    const seq = ring.writeSequence();
    let woke = false;
    const waiting = ring.waitForData(seq, 10_000).then((r) => {
      woke = true;
      return r;
    });
    for (let i = 0; i < 3; i++) {
      const off = ring.reserve(10);
      ring.bytes.set(payload(10, i), off);
      ring.commit(undefined, false);
    }
    await new Promise((r) => setTimeout(r, 30));
    expect(woke).toBe(false); // visible, but nobody was woken
    expect(ring.pendingRecords()).toBe(3);
    ring.notifyConsumers();
    expect(await waiting).toBe('ok');
    expect(drain(ring).map((r) => r.data)).toEqual([0, 1, 2].map((i) => payload(10, i)));
    ring.notifyConsumers(); // nobody waiting: a no-op
  });

  test('several waiters are all woken by one commit', async () => {
    const ring = RingBuffer.create(1024);
    const seq = ring.writeSequence();
    const waits = [
      ring.waitForData(seq, 10_000),
      ring.waitForData(seq, 10_000),
      ring.waitForData(seq, 10_000),
    ];
    setTimeout(() => ring.tryWrite(new Uint8Array(1)), 10);
    expect(await Promise.all(waits)).toEqual(['ok', 'ok', 'ok']);
  });

  test('waitForSpace resolves when a claim frees enough room, times out otherwise', async () => {
    const ring = RingBuffer.create(1024);
    const h = header(ring);
    expect(await ring.waitForSpace(100, 0)).toBe('ok');
    while (ring.tryWrite(new Uint8Array(100))) {}
    expect(ring.canReserve(100)).toBe(false);
    expect(await ring.waitForSpace(100, 50)).toBe('timed-out');
    expect(await ring.waitForSpace(100, 0)).toBe('timed-out');

    const waiting = ring.waitForSpace(100, 10_000);
    let claimed = 0;
    setTimeout(() => {
      claimed = ring.claim(() => true, 1);
    }, 30);
    expect(await waiting).toBe('ok');
    expect(claimed).toBe(1);
    expect(h[L.H_WAITING_PRODUCERS]).toBe(0);
    expect(ring.tryWrite(new Uint8Array(100))).toBe(true);

    // Needs more than one claim's worth: keeps waiting through the first wake-up.
    const big = ring.waitForSpace(300, 10_000);
    let resolved = false;
    void big.then(() => {
      resolved = true;
    });
    ring.claim(() => true, 1);
    await new Promise((r) => setTimeout(r, 20));
    expect(resolved).toBe(false);
    ring.claim(() => true, 2);
    expect(await big).toBe('ok');
    await expect(ring.waitForSpace(505, 1)).rejects.toThrow(RangeError);
  });

  test('waitForData keeps the event loop alive (the wait is not dropped)', async () => {
    // Atomics.waitAsync alone does not hold a Node.js event loop open; this wait would be lost in a worker
    // with nothing else scheduled. Checked across threads in stress.test.ts; here: a pending wait holds a timer.
    const ring = RingBuffer.create(1024);
    const before = (process as unknown as { getActiveResourcesInfo(): string[] }).getActiveResourcesInfo();
    const w = ring.waitForData(ring.writeSequence(), 10_000);
    const during = (process as unknown as { getActiveResourcesInfo(): string[] }).getActiveResourcesInfo();
    expect(during.filter((r) => r === 'Timeout').length).toBe(
      before.filter((r) => r === 'Timeout').length + 1,
    );
    ring.tryWrite(new Uint8Array(0));
    expect(await w).toBe('ok');
  });
});
