/** Locks across real threads: contention parks and wakes; a thread killed while holding a lock is recovered. */
import * as path from 'node:path';
import { Worker } from 'node:worker_threads';
import { RingBuffer } from './index';
import { RING_LAYOUT } from './layout';
import type { HoldLockData } from './ring-test-worker';

const WORKER = path.join(__dirname, 'ring-test-worker.js');

function payload(length: number, seed: number): Uint8Array {
  return Uint8Array.from({ length }, (_, i) => (seed * 13 + i) & 0xff);
}

function drain(ring: RingBuffer): Uint8Array[] {
  const out: Uint8Array[] = [];
  ring.claim((off, len) => out.push(ring.bytes.slice(off, off + len)) > 0, 1000);
  return out;
}

/** Starts a lock-holding worker and resolves once it holds the lock. */
async function holder(
  ring: RingBuffer,
  role: HoldLockData['role'],
  ownerId: number,
  holdMs?: number,
): Promise<{ worker: Worker; exited: Promise<number>; messages: unknown[] }> {
  const signal = new SharedArrayBuffer(8);
  const data: HoldLockData = { role, ring: ring.buffer, ownerId, signal, holdMs };
  const worker = new Worker(WORKER, { workerData: data });
  const messages: unknown[] = [];
  worker.on('message', (m) => messages.push(m));
  const exited = new Promise<number>((resolve, reject) => {
    worker.on('exit', resolve);
    worker.on('error', reject);
  });
  const flag = new Int32Array(signal);
  const deadline = Date.now() + 10_000;
  while (Atomics.load(flag, 0) === 0) {
    if (Date.now() > deadline) throw new Error(`${role} worker never took the lock`);
    await new Promise((r) => setTimeout(r, 2));
  }
  return { worker, exited, messages };
}

const header = (ring: RingBuffer): Int32Array => new Int32Array(ring.buffer, 0, RING_LAYOUT.HEADER_BYTES / 4);

describe('RingBuffer locks across threads', () => {
  test('a producer blocked on the lock parks and is woken when the holder commits', async () => {
    const ring = RingBuffer.create(4096);
    const h = await holder(ring, 'hold-producer-lock', 41, 150);
    expect(header(ring)[RING_LAYOUT.H_P_LOCK]).toBe(41);
    const t0 = performance.now();
    const off = ring.reserve(8); // blocks this thread until the worker commits (~150 ms)
    const waited = performance.now() - t0;
    ring.bytes.set(payload(8, 1), off);
    ring.commit();
    expect(waited).toBeGreaterThan(50);
    expect(waited).toBeLessThan(5_000);
    expect(await h.exited).toBe(0);
    expect(h.messages).toEqual([{ type: 'done' }]);
    const got = drain(ring);
    expect(got.map((r) => r.length)).toEqual([16, 8]); // the holder's record first
    expect(got[0]).toEqual(new Uint8Array(16).fill(0xee));
    expect(header(ring)[RING_LAYOUT.H_P_LOCK_WAITERS]).toBe(0);
  });

  test('a producer killed between reserve and commit: its lock is recovered, its record never appears', async () => {
    const ring = RingBuffer.create(4096);
    ring.tryWrite(payload(10, 1));
    const h = await holder(ring, 'hold-producer-lock', 42);
    expect(header(ring)[RING_LAYOUT.H_P_LOCK]).toBe(42);
    expect(ring.forceReleaseLocks(43)).toBe(false); // wrong owner: nothing happens
    await h.worker.terminate();
    expect(ring.forceReleaseLocks(42)).toBe(true);
    expect(ring.forceReleaseLocks(42)).toBe(false);
    expect(header(ring)[RING_LAYOUT.H_P_LOCK]).toBe(0);
    expect(ring.pendingRecords()).toBe(1);
    expect(ring.tryWrite(payload(20, 2))).toBe(true);
    expect(drain(ring)).toEqual([payload(10, 1), payload(20, 2)]);
  });

  test('a consumer killed inside its claim visitor: lock recovered, nothing it was claiming is lost', async () => {
    const ring = RingBuffer.create(4096);
    for (let i = 0; i < 3; i++) ring.tryWrite(payload(30, i));
    const h = await holder(ring, 'hold-consumer-lock', 44);
    expect(header(ring)[RING_LAYOUT.H_C_LOCK]).toBe(44);
    await h.worker.terminate();
    expect(ring.forceReleaseLocks(44)).toBe(true);
    expect(ring.pendingRecords()).toBe(3);
    expect(ring.readSequence()).toBe(0);
    expect(drain(ring)).toEqual([payload(30, 0), payload(30, 1), payload(30, 2)]);
  });

  test('a consumer holding the lock briefly: a concurrent claim waits, then gets the rest', async () => {
    const ring = RingBuffer.create(4096);
    for (let i = 0; i < 3; i++) ring.tryWrite(payload(30, i));
    const h = await holder(ring, 'hold-consumer-lock', 45, 100);
    const got = drain(ring); // blocks until the worker's claim (of one record) ends
    expect(await h.exited).toBe(0);
    expect(h.messages).toEqual([{ type: 'done', claimed: 1 }]);
    expect(got).toEqual([payload(30, 1), payload(30, 2)]);
  });
});
