import { nextCrashStreak, restartDelayMs, STABLE_RUN_MS } from './backoff';

describe('node restart backoff', () => {
  it('waits 250 ms after a first crash, doubling per crash in a row, at most 10 s', () => {
    expect([0, 1, 2, 3, 4, 5, 6, 7, 20].map(restartDelayMs)).toEqual([
      250, 500, 1000, 2000, 4000, 8000, 10000, 10000, 10000,
    ]);
  });

  it('a crash after a stable run starts a new streak; crashes in a row (or during start) extend it', () => {
    expect(nextCrashStreak(0, undefined)).toBe(1);
    expect(nextCrashStreak(3, undefined)).toBe(4);
    expect(nextCrashStreak(3, STABLE_RUN_MS - 1)).toBe(4);
    expect(nextCrashStreak(9, STABLE_RUN_MS)).toBe(1);
    // Seven crashes in a row reach the cap; one stable run later the wait is back to 250 ms.
    let streak = 0;
    for (let i = 0; i < 7; i++) streak = nextCrashStreak(streak, 1000);
    expect(restartDelayMs(streak - 1)).toBe(10000);
    streak = nextCrashStreak(streak, 10 * 60_000);
    expect(restartDelayMs(streak - 1)).toBe(250);
  });
});
