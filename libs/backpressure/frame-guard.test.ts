import { ErrorCoalescer, ProtocolViolations } from '.';

describe('ErrorCoalescer: one answer per code per window for id-less errors', () => {
  test('the first error of a code is answered, repeats in the window are counted, the next answer reports them', () => {
    const c = new ErrorCoalescer(1000, 8);
    expect(c.offer(3, 0)).toBe(0);
    for (let i = 1; i <= 99; i++) expect(c.offer(3, i)).toBe(-1);
    expect(c.pending(3)).toBe(99);
    // Another code has its own window.
    expect(c.offer(4, 500)).toBe(0);
    expect(c.offer(4, 600)).toBe(-1);
    // Window over: answered again, with the repeats it suppressed.
    expect(c.offer(3, 1000)).toBe(99);
    expect(c.offer(3, 1001)).toBe(-1);
    expect(c.offer(4, 1500)).toBe(1);
    expect(c.offer(3, 5000)).toBe(1);
    expect(c.offer(3, 7000)).toBe(0);
  });

  test('window 0 answers every error; a clock going back never suppresses forever', () => {
    const off = new ErrorCoalescer(0, 4);
    for (let i = 0; i < 10; i++) expect(off.offer(1, 5)).toBe(0);
    const c = new ErrorCoalescer(1000, 4);
    expect(c.offer(1, 10_000)).toBe(0);
    expect(c.offer(1, 5)).toBe(-1);
    expect(c.offer(1, 11_000)).toBe(1);
  });

  test('codes outside the table are always answered', () => {
    const c = new ErrorCoalescer(1000, 2);
    expect(c.offer(7, 0)).toBe(0);
    expect(c.offer(7, 1)).toBe(0);
  });
});

describe('ProtocolViolations: more than N protocol errors in a one-second window', () => {
  test('N errors in a second are tolerated, the N+1st is a violation', () => {
    const v = new ProtocolViolations(50);
    for (let i = 0; i < 50; i++) expect(v.record(i * 10)).toBe(false);
    expect(v.record(999)).toBe(true);
    expect(v.violated).toBe(true);
  });

  test('a steady rate at the limit never trips; the window restarts after a second', () => {
    const v = new ProtocolViolations(5);
    for (let second = 0; second < 20; second++)
      for (let i = 0; i < 5; i++) expect(v.record(second * 1000 + i * 199)).toBe(false);
    expect(v.violated).toBe(false);
  });

  test('0 disables the check; a reconfigured limit applies from the next error', () => {
    const off = new ProtocolViolations(0);
    for (let i = 0; i < 10_000; i++) expect(off.record(0)).toBe(false);
    const v = new ProtocolViolations(100);
    for (let i = 0; i < 10; i++) v.record(i);
    v.setLimit(10);
    expect(v.record(11)).toBe(true);
  });
});
