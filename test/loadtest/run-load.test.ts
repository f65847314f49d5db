import { parseBenchArgs } from '../../loadtest/bench';
import { runLoad, splitEvenly } from '../../loadtest/harness/run-load';
import { startBareEcho } from '../../loadtest/harness/server-process';

describe('splitEvenly', () => {
  it('splits into near-equal shares', () => {
    expect(splitEvenly(10, 3)).toEqual([4, 3, 3]);
    expect(splitEvenly(2, 4)).toEqual([1, 1, 0, 0]);
    expect(splitEvenly(5, 0)).toEqual([5]);
  });
});

describe('bench arguments', () => {
  it('parses scenarios, quick, rounds and env overrides', () => {
    const o = parseBenchArgs(['--scenario', 'ws-echo', '--quick'], { BENCH_CONNECTIONS: '7' }, '/repo', 2);
    expect(o).toMatchObject({
      scenarios: ['ws-echo'],
      quick: true,
      rounds: 1,
      loadgenProcesses: 1,
      connections: 7,
    });
    expect(o.out).toBe('/repo/loadtest/reports');
    expect(parseBenchArgs([], {}, '/repo', 16)).toMatchObject({
      rounds: 3,
      loadgenProcesses: 4,
      quick: false,
    });
  });

  it('rejects unknown scenarios and bad numbers', () => {
    expect(() => parseBenchArgs(['-s', 'nope'], {}, '/r', 2)).toThrow(/unknown scenario "nope"/);
    expect(() => parseBenchArgs([], { BENCH_REQUESTS: '0' }, '/r', 2)).toThrow(/BENCH_REQUESTS/);
    expect(() => parseBenchArgs(['--bogus'], {}, '/r', 2)).toThrow();
  });
});

describe('runLoad against the bare echo server (forked processes)', () => {
  it('splits connections over two load generators and merges the results', async () => {
    const server = await startBareEcho();
    try {
      let went = false;
      let done = false;
      const r = await runLoad({
        url: server.wsUrl,
        connections: 6,
        requestsPerConnection: 50,
        warmupPerConnection: 2,
        body: 'echo-floats',
        timeLimitMs: 10_000,
        processes: 2,
        onGo: () => {
          went = true;
        },
        onDone: () => {
          done = true;
        },
      });
      expect(went && done).toBe(true);
      expect(r.loadgenProcesses).toBe(2);
      expect(r.connectionsOpened).toBe(6);
      expect(r.ok).toBe(300);
      expect(r.errorCount).toBe(0);
      expect(r.unmatched).toBe(0);
      expect(r.versions).toEqual({ '1': 300 });
      expect(r.throughputRps).toBeGreaterThan(0);
      expect(r.latencyMs.p99).toBeGreaterThan(0);
      expect(r.stoppedBy).toBe('completed');
    } finally {
      const exit = await server.stop();
      expect(exit.killed).toBe(false);
    }
  });
});
