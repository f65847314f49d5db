import { readFileSync } from 'node:fs';
import {
  formatNotify,
  monotonicUsec,
  NotifyError,
  NotifySequence,
  parseNotifySocket,
  parseWatchdog,
  requestRate,
  statusLine,
} from './index';

describe('NOTIFY_SOCKET', () => {
  it('is nothing when unset or empty', () => {
    expect(parseNotifySocket(undefined)).toBeUndefined();
    expect(parseNotifySocket('')).toBeUndefined();
  });

  it('takes an absolute path or an @abstract name (the @ is the leading NUL, not part of the name)', () => {
    expect(parseNotifySocket('/run/systemd/notify')).toEqual({ kind: 'path', path: '/run/systemd/notify' });
    expect(parseNotifySocket('@/org/freedesktop/systemd1/notify')).toEqual({
      kind: 'abstract',
      name: '/org/freedesktop/systemd1/notify',
    });
  });

  it('refuses relative paths, a bare @ and names that do not fit sun_path, with a typed error', () => {
    for (const bad of ['run/notify', '@', `/${'x'.repeat(107)}`, `@${'x'.repeat(108)}`]) {
      let caught: unknown;
      try {
        parseNotifySocket(bad);
      } catch (error) {
        caught = error;
      }
      expect(caught).toBeInstanceOf(NotifyError);
      expect((caught as NotifyError).code).toBe('notify_socket_invalid');
    }
    // The longest that fit: 107 path bytes + NUL terminator; NUL + 107 abstract bytes.
    expect(parseNotifySocket(`/${'x'.repeat(106)}`)?.kind).toBe('path');
    expect(parseNotifySocket(`@${'x'.repeat(107)}`)?.kind).toBe('abstract');
  });
});

describe('watchdog', () => {
  it('pings every WATCHDOG_USEC / 2', () => {
    expect(parseWatchdog('30000000', undefined, 42)).toEqual({ usec: 30000000, intervalMs: 15000 });
    expect(parseWatchdog('1000000', '42', 42)).toEqual({ usec: 1000000, intervalMs: 500 });
  });

  it('is not ours when WATCHDOG_PID names another process, and absent without WATCHDOG_USEC', () => {
    expect(parseWatchdog('1000000', '41', 42)).toBeUndefined();
    expect(parseWatchdog(undefined, '42', 42)).toBeUndefined();
    expect(parseWatchdog('', undefined, 42)).toBeUndefined();
  });

  it('rejects malformed values with a typed error', () => {
    for (const [usec, pid] of [
      ['0', undefined],
      ['-5', undefined],
      ['1e6', undefined],
      ['1000000', 'self'],
    ] as const) {
      expect(() => parseWatchdog(usec, pid, 42)).toThrow(NotifyError);
    }
  });
});

describe('messages', () => {
  it('are KEY=value lines, a value never spanning lines', () => {
    expect(
      formatNotify([
        ['READY', 1],
        ['STATUS', 'a\nb\r\nc'],
        ['MONOTONIC_USEC', 12n],
      ]),
    ).toBe('READY=1\nSTATUS=a b c\nMONOTONIC_USEC=12');
  });

  it('STATUS summarises nodes, epoch, rate, wedged nodes and a failed reload on one line', () => {
    const line = statusLine({
      phase: 'ready',
      nodesReady: 1,
      nodes: 2,
      epoch: 3,
      requestsPerSecond: 12.345,
      unresponsive: [1],
      lastReloadError: 'prepare failed',
    });
    expect(line).toBe(
      'ready; nodes ready 1/2; epoch 3; requests/s 12.3; event loop unresponsive: node 1; last reload failed: prepare failed',
    );
    expect(
      statusLine({
        phase: 'starting',
        nodesReady: 0,
        nodes: 1,
        epoch: 0,
        requestsPerSecond: undefined,
        unresponsive: [],
      }),
    ).toBe('starting; nodes ready 0/1; epoch 0; requests/s -');
  });

  it('request rate sums per-node deltas and counts a restarted node (new pid) from zero', () => {
    const before = [
      { node: 0, pid: 10, answered: 100 },
      { node: 1, pid: 11, answered: 50 },
    ];
    const after = [
      { node: 0, pid: 10, answered: 160 },
      { node: 1, pid: 12, answered: 20 },
    ];
    expect(requestRate(before, after, 2)).toBe(40);
    expect(requestRate(before, after, 0)).toBe(0);
  });

  it("MONOTONIC_USEC is hrtime in µs, and hrtime is the kernel's monotonic clock (≈ /proc/uptime here)", () => {
    expect(monotonicUsec(1_234_567_891n)).toBe(1_234_567n);
    let uptime: number;
    try {
      uptime = Number(readFileSync('/proc/uptime', 'utf8').split(' ')[0]);
    } catch {
      return; // not Linux: nothing to compare with
    }
    const seconds = Number(monotonicUsec(process.hrtime.bigint())) / 1e6;
    // /proc/uptime is CLOCK_BOOTTIME: equal to CLOCK_MONOTONIC but for time spent suspended.
    expect(Math.abs(seconds - uptime)).toBeLessThan(5);
  });
});

describe('sequence', () => {
  it('READY → RELOADING+MONOTONIC_USEC → READY → STOPPING', () => {
    const sequence = new NotifySequence();
    expect(sequence.timed).toBe(true);
    expect(sequence.started()).toEqual([['READY', 1]]);
    expect(sequence.timed).toBe(false);
    expect(sequence.reloading(5n)).toEqual([
      ['RELOADING', 1],
      ['MONOTONIC_USEC', 5n],
    ]);
    expect(sequence.timed).toBe(true);
    expect(sequence.reloaded()).toEqual([['READY', 1]]);
    expect(sequence.stopping()).toEqual([['STOPPING', 1]]);
    expect(sequence.stopping()).toBeUndefined();
    expect(sequence.timed).toBe(true);
  });

  it('a reload before the start finished, or during the drain, sends nothing (READY=1 would lie)', () => {
    const sequence = new NotifySequence();
    expect(sequence.reloading(1n)).toBeUndefined();
    expect(sequence.reloaded()).toBeUndefined();
    expect(sequence.phase).toBe('starting');
    expect(sequence.started()).toEqual([['READY', 1]]);
    expect(sequence.started()).toBeUndefined();
    sequence.stopping();
    expect(sequence.reloading(2n)).toBeUndefined();
    expect(sequence.reloaded()).toBeUndefined();
    expect(sequence.started()).toBeUndefined();
  });
});
