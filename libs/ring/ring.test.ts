import { RingBuffer, RingError, RingRangeError, RingTypeError } from './index';
import { recordBytes } from './layout';
import { drain, expectCode, header, L, payload, write } from './ring.test-util';

describe('RingBuffer.create / from', () => {
  test('create allocates header + power-of-two data area', () => {
    const ring = RingBuffer.create(1024);
    expect(ring.capacity).toBe(1024);
    expect(ring.maxRecordBytes).toBe(504);
    expect(ring.bytes.length).toBe(1024);
    expect(ring.view.byteLength).toBe(1024);
    expect(ring.buffer).toBeInstanceOf(SharedArrayBuffer);
    expect(ring.buffer.byteLength).toBe(L.HEADER_BYTES + 1024);
    expect(RingBuffer.byteLengthFor(1 << 16)).toBe(L.HEADER_BYTES + (1 << 16));
    expect(ring.bytes.byteOffset % 8).toBe(0);
    expect(ring.pendingRecords()).toBe(0);
    expect(ring.freeBytes()).toBe(1024);
    expect(ring.writeSequence()).toBe(0);
    expect(ring.readSequence()).toBe(0);
    expect(RingBuffer.create(1 << 20).maxRecordBytes).toBe((1 << 19) - 8);
  });

  test.each([0, 512, 1000, 1023, 1025, 3000, 2 ** 31, -1024])('create(%p) is a RangeError', (cap) => {
    expectCode(() => RingBuffer.create(cap), RingRangeError, 'ring_capacity');
    expectCode(() => RingBuffer.create(cap), RangeError, 'ring_capacity');
  });

  test.each([1024.5, Number.NaN, '1024', undefined, null])('create(%p) is a TypeError', (cap) => {
    expectCode(() => RingBuffer.create(cap as number), TypeError, 'ring_capacity');
  });

  test('the error message says what is wrong', () => {
    expect(() => RingBuffer.create(1000)).toThrow(/power of two between 1024 and \d+ bytes, got 1000/);
  });

  test('from() shares the same ring', () => {
    const a = RingBuffer.create(2048);
    const b = RingBuffer.from(a.buffer);
    expect(b.capacity).toBe(2048);
    expect(b.maxRecordBytes).toBe(a.maxRecordBytes);
    expect(a.tryWrite(payload(10, 1))).toBe(true);
    expect(b.pendingRecords()).toBe(1);
    const got = drain(b);
    expect(got.map((r) => Array.from(r.data))).toEqual([Array.from(payload(10, 1))]);
    expect(a.pendingRecords()).toBe(0);
  });

  test('from() rejects garbage with a clear error', () => {
    expectCode(() => RingBuffer.from(new ArrayBuffer(4096) as never), RingTypeError, 'ring_bad_buffer');
    expectCode(() => RingBuffer.from({} as never), TypeError, 'ring_bad_buffer');
    expectCode(() => RingBuffer.from(new SharedArrayBuffer(100)), TypeError, 'ring_bad_buffer');
    // Right size, all zeros: no magic.
    expect(() => RingBuffer.from(new SharedArrayBuffer(L.HEADER_BYTES + 1024))).toThrow(
      /not a ring buffer \(magic/,
    );

    const bad = (tamper: (h: Int32Array) => void, extra = 0): void => {
      const ring = RingBuffer.create(1024);
      const buf = new SharedArrayBuffer(ring.buffer.byteLength + extra);
      new Uint8Array(buf).set(new Uint8Array(ring.buffer));
      tamper(new Int32Array(buf, 0, L.HEADER_BYTES / 4));
      expectCode(() => RingBuffer.from(buf), RingTypeError, 'ring_bad_buffer');
    };
    bad((h) => {
      h[L.H_VERSION] = 99;
    });
    bad((h) => {
      h[L.H_CAPACITY] = 1000;
    });
    bad((h) => {
      h[L.H_CAPACITY] = 2048;
    });
    bad((h) => {
      h[L.H_HEADER_BYTES] = 64;
    });
    bad(() => {}, 8); // buffer size does not match the header
    expect(() => {
      const ring = RingBuffer.create(1024);
      header(ring)[L.H_VERSION] = 7;
      RingBuffer.from(ring.buffer);
    }).toThrow(/layout version 7 is not supported/);
  });
});

describe('reserve / commit / peek / claim', () => {
  test('round trip keeps order, content, lengths; offsets are 8-byte aligned', () => {
    const ring = RingBuffer.create(4096);
    const lengths = [0, 1, 7, 8, 9, 100, 504, 0, 3];
    for (let i = 0; i < lengths.length; i++) expect(write(ring, lengths[i]!, i)).toBeGreaterThanOrEqual(0);
    expect(ring.pendingRecords()).toBe(lengths.length);
    expect(ring.writeSequence()).toBe(lengths.length);

    const peeked = drain(ring, Number.POSITIVE_INFINITY, true);
    expect(ring.pendingRecords()).toBe(lengths.length); // peek consumes nothing
    const claimed = drain(ring);
    for (const got of [peeked, claimed]) {
      expect(got.map((r) => r.length)).toEqual(lengths);
      expect(got.map((r) => r.index)).toEqual(lengths.map((_, i) => i));
      got.forEach((r, i) => {
        expect(r.offset % 8).toBe(0);
        expect(Array.from(r.data)).toEqual(Array.from(payload(lengths[i]!, i)));
      });
    }
    expect(ring.pendingRecords()).toBe(0);
    expect(ring.readSequence()).toBe(lengths.length);
    expect(ring.freeBytes()).toBe(4096);
    expect(drain(ring)).toEqual([]);
  });

  test('reserve() returns where to write; the view works at that offset', () => {
    const ring = RingBuffer.create(1024);
    const off = ring.reserve(16);
    expect(off).toBe(8); // after the 8-byte record header
    expect(ring.hasReservation).toBe(true);
    ring.view.setFloat64(off, Math.PI, true);
    ring.view.setUint32(off + 8, 0xdeadbeef, true);
    ring.commit();
    expect(ring.hasReservation).toBe(false);
    const seen: number[] = [];
    ring.claim((o, len) => {
      expect(len).toBe(16);
      seen.push(ring.view.getFloat64(o, true), ring.view.getUint32(o + 8, true));
      return true;
    }, 10);
    expect(seen).toEqual([Math.PI, 0xdeadbeef]);
    // A Float64Array can sit directly on a payload (8-byte aligned in the SharedArrayBuffer too).
    const o2 = ring.reserve(24);
    new Float64Array(ring.buffer, ring.bytes.byteOffset + o2, 3).set([1, 2, 3]);
    ring.commit();
    ring.claim((o, len) => {
      expect(Array.from(new Float64Array(ring.buffer, ring.bytes.byteOffset + o, len / 8))).toEqual([
        1, 2, 3,
      ]);
      return true;
    }, 1);
  });

  test('tryWrite copies the payload', () => {
    const ring = RingBuffer.create(1024);
    expect(ring.tryWrite(payload(33, 5))).toBe(true);
    expect(ring.tryWrite(new Uint8Array(0))).toBe(true);
    const got = drain(ring);
    expect(got.map((r) => r.length)).toEqual([33, 0]);
    expect(Array.from(got[0]!.data)).toEqual(Array.from(payload(33, 5)));
  });

  test('commit(length) shrinks the record; abort() publishes nothing', () => {
    const ring = RingBuffer.create(1024);
    const off = ring.reserve(200);
    ring.bytes.set(payload(50, 9), off);
    ring.commit(50);
    expect(ring.freeBytes()).toBe(1024 - recordBytes(50));
    ring.reserve(100);
    ring.abort();
    expect(ring.freeBytes()).toBe(1024 - recordBytes(50));
    expect(ring.pendingRecords()).toBe(1);
    const got = drain(ring);
    expect(got.map((r) => r.length)).toEqual([50]);
    expect(Array.from(got[0]!.data)).toEqual(Array.from(payload(50, 9)));
    // Growing is not allowed.
    ring.reserve(10);
    expectCode(() => ring.commit(11), RangeError, 'ring_invalid_argument');
    ring.abort();
  });

  test('protocol misuse throws typed errors and leaves the ring usable', () => {
    const ring = RingBuffer.create(1024);
    expectCode(() => ring.commit(), RingError, 'ring_no_reservation');
    expectCode(() => ring.abort(), RingError, 'ring_no_reservation');
    expectCode(() => ring.reserve(505), RangeError, 'ring_record_too_large');
    expectCode(() => ring.reserve(-1), RangeError, 'ring_record_too_large');
    expectCode(() => ring.reserve(1.5), RangeError, 'ring_record_too_large');
    expectCode(() => ring.reserve(Number.NaN), RangeError, 'ring_record_too_large');
    expectCode(() => ring.tryWrite(new Uint8Array(505)), RangeError, 'ring_record_too_large');
    expectCode(() => ring.canReserve(505), RangeError, 'ring_record_too_large');
    expect(ring.reserve(504)).toBe(8); // exactly maxRecordBytes is fine
    expectCode(() => ring.reserve(1), RingError, 'ring_reservation_pending');
    expectCode(() => ring.tryWrite(new Uint8Array(1)), RingError, 'ring_reservation_pending');
    expectCode(() => ring.setOwnerId(5), RingError, 'ring_reservation_pending');
    ring.commit();
    expectCode(() => ring.claim(null as never, 1), TypeError, 'ring_invalid_argument');
    expectCode(() => ring.claim(() => true, -1), RangeError, 'ring_invalid_argument');
    expectCode(() => ring.claim(() => true, Number.NaN), RangeError, 'ring_invalid_argument');
    expect(ring.pendingRecords()).toBe(1);
    expect(drain(ring).map((r) => r.length)).toEqual([504]);
  });

  test('a visitor that stops early leaves the rest, starting with the record it stopped on', () => {
    const ring = RingBuffer.create(1024);
    for (let i = 0; i < 5; i++) write(ring, 10 + i, i);
    const lens: number[] = [];
    const n = ring.claim((_o, len, index) => {
      if (index === 2) return false;
      lens.push(len);
      return true;
    }, 100);
    expect(n).toBe(2);
    expect(lens).toEqual([10, 11]);
    expect(ring.pendingRecords()).toBe(3);
    expect(ring.readSequence()).toBe(2);
    expect(ring.freeBytes()).toBe(1024 - recordBytes(12) - recordBytes(13) - recordBytes(14));
    // A visitor that refuses the first record takes nothing.
    expect(ring.claim(() => false, 100)).toBe(0);
    expect(ring.pendingRecords()).toBe(3);
    expect(drain(ring).map((r) => r.length)).toEqual([12, 13, 14]);
  });

  test('maxRecords limits claim and peek', () => {
    const ring = RingBuffer.create(1024);
    for (let i = 0; i < 6; i++) write(ring, i, i);
    expect(ring.claim(() => true, 0)).toBe(0);
    expect(ring.peek(() => true, 0)).toBe(0);
    expect(drain(ring, 4, true).map((r) => r.length)).toEqual([0, 1, 2, 3]);
    expect(drain(ring, 2).map((r) => r.length)).toEqual([0, 1]);
    expect(drain(ring, 3).map((r) => r.length)).toEqual([2, 3, 4]);
    expect(ring.pendingRecords()).toBe(1);
    // peek's count includes the visit that said stop
    expect(ring.peek(() => false)).toBe(1);
    expect(drain(ring, 100).map((r) => r.length)).toEqual([5]);
  });

  test('a throwing visitor consumes the records taken before it, not the one it threw on', () => {
    const ring = RingBuffer.create(1024);
    for (let i = 0; i < 4; i++) write(ring, 20 + i, i);
    expect(() =>
      ring.claim((_o, _len, index) => {
        if (index === 2) throw new Error('boom');
        return true;
      }, 10),
    ).toThrow('boom');
    expect(ring.pendingRecords()).toBe(2);
    expect(drain(ring).map((r) => r.length)).toEqual([22, 23]);
    // ...and the lock was released (otherwise this would be a re-entry error).
    expect(ring.claim(() => true, 1)).toBe(0);
  });

  test('nested claim/peek inside a visitor is refused instead of deadlocking', () => {
    const ring = RingBuffer.create(1024);
    write(ring, 1, 1);
    expect(() => ring.claim(() => ring.claim(() => true, 1) >= 0, 1)).toThrow(
      /consumer lock is already held/,
    );
    expect(() => ring.peek(() => ring.peek(() => true) >= 0)).toThrow(RingError);
    expect(ring.pendingRecords()).toBe(1);
    // A second instance of the same thread (same default owner id) is refused too.
    const twin = RingBuffer.from(ring.buffer);
    expect(ring.reserve(1)).toBeGreaterThan(0);
    expectCode(() => twin.reserve(1), RingError, 'ring_lock_reentry');
    ring.abort();
    expect(twin.tryWrite(new Uint8Array(1))).toBe(true);
  });

  test('a corrupted record header is detected, not delivered', () => {
    const ring = RingBuffer.create(1024);
    write(ring, 16, 1);
    write(ring, 16, 2);
    const w = new Uint32Array(ring.buffer, ring.bytes.byteOffset, 256);
    w[recordBytes(16) / 4] = 400; // second record's length, check word not updated
    const lens: number[] = [];
    expect(() => ring.claim((_o, len) => lens.push(len) > 0, 10)).toThrow(/corrupt/);
    expectCode(() => ring.claim(() => true, 10), RingError, 'ring_corrupt');
    expect(lens).toEqual([16]);
    expect(ring.pendingRecords()).toBe(1);
  });
});

describe('full ring', () => {
  test('reserve returns -1, tryWrite false, nothing is lost or overwritten', () => {
    const ring = RingBuffer.create(1024);
    let n = 0;
    while (ring.tryWrite(payload(16, n))) n++;
    expect(n).toBe(Math.floor(1024 / recordBytes(16))); // 42 records of 24 bytes
    expect(ring.reserve(16)).toBe(-1);
    expect(ring.hasReservation).toBe(false);
    expect(ring.freeBytes()).toBe(16);
    expect(ring.tryWrite(new Uint8Array(0))).toBe(true); // 8 bytes each fit in the 16-byte tail
    expect(ring.tryWrite(new Uint8Array(0))).toBe(true);
    expect(ring.tryWrite(new Uint8Array(0))).toBe(false);
    expect(ring.canReserve(0)).toBe(false);
    expect(ring.freeBytes()).toBe(0);
    expect(ring.pendingRecords()).toBe(n + 2);
    // Refused writes changed nothing.
    const before = Buffer.from(ring.bytes).toString('hex');
    for (let i = 0; i < 10; i++) expect(ring.tryWrite(payload(16, 999))).toBe(false);
    expect(Buffer.from(ring.bytes).toString('hex')).toBe(before);
    // Free one record: exactly one more 16-byte record fits (at offset 0, wrapping).
    expect(drain(ring, 1).map((r) => r.length)).toEqual([16]);
    expect(ring.tryWrite(payload(16, n))).toBe(true);
    expect(ring.tryWrite(payload(16, n + 1))).toBe(false);
    const got = drain(ring);
    expect(got.map((r) => r.length)).toEqual([...new Array(n - 1).fill(16), 0, 0, 16]);
    const seeds = [...Array.from({ length: n - 1 }, (_, i) => i + 1), -1, -1, n];
    got.forEach((r, i) => {
      if (r.length) expect(r.data).toEqual(payload(16, seeds[i]!));
    });
  });
});

describe('owner ids and forceReleaseLocks', () => {
  test('owner id defaults to threadId + 1 and is validated', () => {
    const ring = RingBuffer.create(1024);
    expect(ring.ownerId).toBeGreaterThanOrEqual(1);
    ring.setOwnerId(77);
    expect(ring.ownerId).toBe(77);
    for (const bad of [0, -1, 1.5, 2 ** 31, Number.NaN, '3']) {
      expectCode(() => ring.setOwnerId(bad as number), RangeError, 'ring_invalid_argument');
      expectCode(() => ring.forceReleaseLocks(bad as number), RangeError, 'ring_invalid_argument');
    }
    expectCode(() => ring.forceReleaseLocks(77), RangeError, 'ring_invalid_argument');
  });

  test('a dead producer holding the lock mid-reserve: released, its record never appears', () => {
    const dead = RingBuffer.create(1024);
    dead.setOwnerId(10);
    const rescuer = RingBuffer.from(dead.buffer);
    rescuer.setOwnerId(20);
    expect(rescuer.forceReleaseLocks(10)).toBe(false); // holds nothing
    const off = dead.reserve(32);
    dead.bytes.fill(0xee, off, off + 32);
    expect(header(dead)[L.H_P_LOCK]).toBe(10);
    expect(rescuer.forceReleaseLocks(10)).toBe(true);
    expect(header(dead)[L.H_P_LOCK]).toBe(0);
    expect(rescuer.pendingRecords()).toBe(0);
    expect(rescuer.tryWrite(payload(5, 5))).toBe(true);
    // The "dead" instance (if it were still alive) cannot publish under a lock it lost.
    expectCode(() => dead.commit(), RingError, 'ring_lock_lost');
    expect(dead.hasReservation).toBe(false);
    const got = drain(rescuer);
    expect(got.map((r) => r.length)).toEqual([5]);
    expect(got[0]!.data).toEqual(payload(5, 5));
  });

  test('a producer that died inside commit (position published, sequence not) is completed', () => {
    const ring = RingBuffer.create(1024);
    ring.setOwnerId(10);
    const rescuer = RingBuffer.from(ring.buffer);
    rescuer.setOwnerId(20);
    ring.tryWrite(payload(8, 1));
    const h = header(ring);
    // Replay commit() of a 24-byte record by owner 10 up to (and including) the position store.
    const off = ring.reserve(24);
    ring.bytes.set(payload(24, 2), off);
    const w = new Uint32Array(ring.buffer, ring.bytes.byteOffset, 256);
    w[(off - 8) / 4] = 24;
    w[(off - 8) / 4 + 1] = (24 ^ L.RECORD_CHECK) >>> 0;
    const newPos = h[L.H_WRITE_POS]! + recordBytes(24);
    h[L.H_P_INTENT_POS] = newPos;
    Atomics.store(h, L.H_P_INTENT_SEQ, h[L.H_WRITE_SEQ]! + 1);
    Atomics.store(h, L.H_WRITE_POS, newPos);
    // ...and dies here.
    expect(rescuer.pendingRecords()).toBe(1);
    expect(rescuer.forceReleaseLocks(10)).toBe(true);
    expect(rescuer.pendingRecords()).toBe(2);
    const got = drain(rescuer);
    expect(got.map((r) => r.data)).toEqual([payload(8, 1), payload(24, 2)]);
    expect(rescuer.tryWrite(payload(3, 3))).toBe(true);
    expect(drain(rescuer).map((r) => r.data)).toEqual([payload(3, 3)]);
  });

  test('a producer that died after the intent but before publishing: nothing appears', () => {
    const ring = RingBuffer.create(1024);
    ring.setOwnerId(10);
    const rescuer = RingBuffer.from(ring.buffer);
    rescuer.setOwnerId(20);
    const h = header(ring);
    ring.reserve(24);
    h[L.H_P_INTENT_POS] = h[L.H_WRITE_POS]! + recordBytes(24);
    Atomics.store(h, L.H_P_INTENT_SEQ, h[L.H_WRITE_SEQ]! + 1);
    expect(rescuer.forceReleaseLocks(10)).toBe(true);
    expect(rescuer.pendingRecords()).toBe(0);
    expect(h[L.H_P_INTENT_SEQ]).toBe(h[L.H_WRITE_SEQ]);
    expect(rescuer.tryWrite(payload(4, 4))).toBe(true);
    expect(drain(rescuer).map((r) => r.data)).toEqual([payload(4, 4)]);
  });

  test('a consumer that died inside claim (position published, sequence not) is completed', () => {
    const ring = RingBuffer.create(1024);
    ring.setOwnerId(10);
    const rescuer = RingBuffer.from(ring.buffer);
    rescuer.setOwnerId(20);
    for (let i = 0; i < 3; i++) ring.tryWrite(payload(16, i));
    const h = header(ring);
    // Owner 10 takes the consumer lock and publishes the read position of 2 records, then dies.
    h[L.H_C_LOCK] = 10;
    const newPos = h[L.H_READ_POS]! + 2 * recordBytes(16);
    h[L.H_C_INTENT_POS] = newPos;
    Atomics.store(h, L.H_C_INTENT_SEQ, h[L.H_READ_SEQ]! + 2);
    Atomics.store(h, L.H_READ_POS, newPos);
    expect(rescuer.forceReleaseLocks(10)).toBe(true);
    expect(rescuer.readSequence()).toBe(2);
    expect(rescuer.pendingRecords()).toBe(1);
    expect(drain(rescuer).map((r) => r.data)).toEqual([payload(16, 2)]);
  });
});
