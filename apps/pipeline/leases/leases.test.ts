/** The broker-free part of partition leases: balanced shares and rendezvous preference order. */
import { balancedTarget, hash32, preferenceOrder } from './assignment';

describe('balancedTarget', () => {
  test('shares sum to P and differ by at most one, lower ranks first', () => {
    for (let p = 1; p <= 17; p++) {
      for (let n = 1; n <= 6; n++) {
        const ids = Array.from({ length: n }, (_, i) => `inst-${i}`);
        const shares = ids.map((id) => balancedTarget(p, ids, id));
        expect(shares.reduce((a, b) => a + b, 0)).toBe(p);
        expect(Math.max(...shares) - Math.min(...shares)).toBeLessThanOrEqual(1);
        expect([...shares].sort((a, b) => b - a)).toEqual(shares);
      }
    }
  });

  test('the documented examples', () => {
    expect(['a', 'b'].map((id) => balancedTarget(4, ['b', 'a'], id))).toEqual([2, 2]);
    expect(['a', 'b', 'c'].map((id) => balancedTarget(4, ['c', 'a', 'b'], id))).toEqual([2, 1, 1]);
    expect(['a', 'b', 'c'].map((id) => balancedTarget(2, ['a', 'b', 'c'], id))).toEqual([1, 1, 0]);
  });

  test('self counts as live before its heartbeat is visible, duplicates count once', () => {
    expect(balancedTarget(4, [], 'solo')).toBe(4);
    expect(balancedTarget(4, ['a'], 'b')).toBe(2);
    expect(balancedTarget(4, ['a', 'a', 'b'], 'b')).toBe(2);
  });

  test('does not depend on the order of the live list', () => {
    expect(balancedTarget(5, ['z', 'm', 'a'], 'm')).toBe(balancedTarget(5, ['a', 'm', 'z'], 'm'));
  });
});

describe('preferenceOrder', () => {
  test('is a permutation of the partitions, stable across calls', () => {
    const order = preferenceOrder('inst-1', 16);
    expect([...order].sort((a, b) => a - b)).toEqual(Array.from({ length: 16 }, (_, i) => i));
    expect(preferenceOrder('inst-1', 16)).toEqual(order);
  });

  test('instances prefer different partitions', () => {
    const firsts = new Set(Array.from({ length: 20 }, (_, i) => preferenceOrder(`inst-${i}`, 64)[0]));
    expect(firsts.size).toBeGreaterThan(10);
  });

  test('growing P keeps the relative order of the old partitions (rendezvous property)', () => {
    const small = preferenceOrder('node-a', 8);
    const large = preferenceOrder('node-a', 12).filter((p) => p < 8);
    expect(large).toEqual(small);
  });

  test('hash32 is a known, well-spread 32-bit value', () => {
    expect(hash32('')).toBe(hash32(''));
    expect(hash32('a/0')).not.toBe(hash32('a/1'));
    const h = hash32('streaminfer');
    expect(Number.isInteger(h) && h >= 0 && h < 2 ** 32).toBe(true);
  });
});
