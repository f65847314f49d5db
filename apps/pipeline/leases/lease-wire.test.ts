/** The shared fence slots, broker-free: valid until a time, and only for the acquisition whose token it holds. */
import { beatView, fenceHolds, fenceView, SLOT_MAIN_BEAT, slotBuffer, storeFence } from './lease-wire';

const NOW = 1_700_000_000_000;

test('a stale acquisition of the same partition is fenced once the partition is claimed again', () => {
  const fences = fenceView(slotBuffer(3));
  // Acquisition 41 of partition 2, valid for 3 s.
  storeFence(fences, 2, NOW + 3000, 41);
  expect(fenceHolds(fences, 2, 41, NOW)).toBe(true);
  // A renewal moves the time, never the token.
  storeFence(fences, 2, NOW + 4000, 41);
  expect(fenceHolds(fences, 2, 41, NOW + 3500)).toBe(true);
  // Lost, then claimed again under revision 57: the old loop's token no longer passes, the new one does.
  storeFence(fences, 2, 0, 41);
  expect(fenceHolds(fences, 2, 41, NOW)).toBe(false);
  storeFence(fences, 2, NOW + 6000, 57);
  expect(fenceHolds(fences, 2, 41, NOW + 1000)).toBe(false);
  expect(fenceHolds(fences, 2, 57, NOW + 1000)).toBe(true);
  // Past its time the current acquisition fails too.
  expect(fenceHolds(fences, 2, 57, NOW + 6000)).toBe(false);
});

test('times and tokens beyond 32 bits round-trip; tokens equal in their low 32 bits still differ', () => {
  const fences = fenceView(slotBuffer(1));
  const token = 2 ** 40 + 7;
  storeFence(fences, 0, NOW + 1, token);
  expect(fenceHolds(fences, 0, token, NOW)).toBe(true);
  expect(fenceHolds(fences, 0, token, NOW + 1)).toBe(false);
  expect(fenceHolds(fences, 0, 7, NOW)).toBe(false);
  expect(fenceHolds(fences, 0, 2 ** 41 + 7, NOW)).toBe(false);
  storeFence(fences, 0, NOW + 1, Number.MAX_SAFE_INTEGER);
  expect(fenceHolds(fences, 0, Number.MAX_SAFE_INTEGER, NOW)).toBe(true);
});

test('a read overlapping a write (odd sequence) never says yes', () => {
  const fences = fenceView(slotBuffer(1));
  storeFence(fences, 0, NOW + 1000, 3);
  Atomics.add(fences, 0, 1);
  expect(fenceHolds(fences, 0, 3, NOW)).toBe(false);
  Atomics.add(fences, 0, 1);
  expect(fenceHolds(fences, 0, 3, NOW)).toBe(true);
});

test('partitions and the main beat do not share memory', () => {
  const sab = slotBuffer(4);
  const beat = beatView(sab);
  const fences = fenceView(sab);
  Atomics.store(beat, SLOT_MAIN_BEAT, BigInt(NOW));
  storeFence(fences, 1, NOW + 1000, 9);
  for (const p of [0, 2, 3]) expect(fenceHolds(fences, p, 0, NOW)).toBe(false);
  storeFence(fences, 3, NOW + 1000, 10);
  expect(fenceHolds(fences, 1, 9, NOW)).toBe(true);
  expect(fenceHolds(fences, 3, 10, NOW)).toBe(true);
  expect(Number(Atomics.load(beat, SLOT_MAIN_BEAT))).toBe(NOW);
  expect(fences.length).toBe(4 * 5);
});
