/** The shared fence slots, broker-free: valid until a time, and only for the acquisition whose token it holds. */
import { fenceHolds, SLOT_MAIN_BEAT, slotBuffer, storeFence, tokenSlot, untilSlot } from './lease-wire';

const NOW = 1_700_000_000_000;

test('a stale acquisition of the same partition is fenced once the partition is claimed again', () => {
  const slots = new BigInt64Array(slotBuffer(3));
  // Acquisition 41 of partition 2, valid for 3 s.
  storeFence(slots, 2, NOW + 3000, 41);
  expect(fenceHolds(slots, 2, 41, NOW)).toBe(true);
  // A renewal moves the time, never the token.
  storeFence(slots, 2, NOW + 4000, 41);
  expect(fenceHolds(slots, 2, 41, NOW + 3500)).toBe(true);
  // Lost, then claimed again under revision 57: the old loop's token no longer passes, the new one does.
  storeFence(slots, 2, 0, 41);
  expect(fenceHolds(slots, 2, 41, NOW)).toBe(false);
  storeFence(slots, 2, NOW + 6000, 57);
  expect(fenceHolds(slots, 2, 41, NOW + 1000)).toBe(false);
  expect(fenceHolds(slots, 2, 57, NOW + 1000)).toBe(true);
  // Past its time the current acquisition fails too.
  expect(fenceHolds(slots, 2, 57, NOW + 6000)).toBe(false);
});

test('partitions and the main beat have slots of their own', () => {
  const slots = new BigInt64Array(slotBuffer(4));
  const used = [SLOT_MAIN_BEAT, ...[0, 1, 2, 3].flatMap((p) => [untilSlot(p), tokenSlot(p)])];
  expect(new Set(used).size).toBe(used.length);
  expect(Math.max(...used)).toBe(slots.length - 1);
  storeFence(slots, 1, NOW + 1000, 7);
  for (const p of [0, 2, 3]) expect(fenceHolds(slots, p, 0, NOW)).toBe(false);
  expect(fenceHolds(slots, 1, 7, NOW)).toBe(true);
});
