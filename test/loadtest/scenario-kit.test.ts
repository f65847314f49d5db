import {
  interpolateLog2,
  runAgainst,
  stampSharedServer,
  withServer,
} from '../../loadtest/harness/scenario-kit';
import type { ServerHandle } from '../../loadtest/harness/server-process';
import type { LoadResult } from '../../loadtest/harness/stats';
import type { LoadSpec, RunRecord, ScenarioContext } from '../../loadtest/harness/types';

describe('interpolateLog2', () => {
  const pts: [number, number][] = [
    [1, 300],
    [2, 600],
    [4, 900],
    [64, 3300],
  ];

  it('returns measured points exactly', () => {
    expect(interpolateLog2(pts, 1)).toBe(300);
    expect(interpolateLog2(pts, 4)).toBe(900);
    expect(interpolateLog2(pts, 64)).toBe(3300);
  });

  it('is linear in log2(x) between neighbours', () => {
    // log2(2√2) = 1.5: halfway between batch 2 and batch 4
    expect(interpolateLog2(pts, 2 * Math.SQRT2)).toBeCloseTo(750, 9);
    // log2(16) = 4: halfway between batch 4 (log2 = 2) and batch 64 (log2 = 6)
    expect(interpolateLog2(pts, 16)).toBeCloseTo(2100, 9);
  });

  it('clamps outside the measured range', () => {
    expect(interpolateLog2(pts, 0.5)).toBe(300);
    expect(interpolateLog2(pts, 128)).toBe(3300);
  });

  it('sorts its input and skips unusable points', () => {
    const messy: [number, number][] = [
      [4, 900],
      [0, 1],
      [2, Number.NaN],
      [1, 300],
      [Number.POSITIVE_INFINITY, 5],
    ];
    expect(interpolateLog2(messy, 2)).toBeCloseTo(600, 9);
  });

  it('is undefined without points or without a positive x', () => {
    expect(interpolateLog2([], 3)).toBeUndefined();
    expect(interpolateLog2(pts, 0)).toBeUndefined();
    expect(interpolateLog2(pts, Number.NaN)).toBeUndefined();
  });

  it('handles a single point', () => {
    expect(interpolateLog2([[8, 42]], 3)).toBe(42);
  });
});

describe('runAgainst', () => {
  function fakeServer(): ServerHandle {
    return {
      kind: 'streaminfer',
      label: 's',
      pid: 1,
      port: 1,
      baseUrl: 'http://127.0.0.1:1',
      wsUrl: 'ws://127.0.0.1:1/ws',
      adminUrl: 'http://127.0.0.1:2',
      command: ['node', 'x'],
      env: { A: '1' },
      stdoutTail: () => '',
      stderrTail: () => '',
      cpuMs: () => undefined,
      exited: () => false,
      stop: async () => ({ code: 0, signal: null, stopMs: 1, killed: false }),
    };
  }
  const ctx = {
    log: () => {},
    measure: async (label: string, server: ServerHandle): Promise<RunRecord> => ({
      label,
      target: server.kind,
      load: { ok: 1 } as LoadResult,
    }),
  } as unknown as ScenarioContext;
  const load = {} as LoadSpec;

  it("labels the run with the caller's target, not the server kind", async () => {
    const run = await runAgainst(ctx, 'batch=1', 'unbatched', async () => fakeServer(), load);
    expect(run.target).toBe('unbatched');
    expect(run.server?.env).toEqual({ A: '1' });
  });

  it('adds collector figures and turns a failed start into run.error', async () => {
    const run = await runAgainst(
      ctx,
      'b',
      'batched',
      async () => fakeServer(),
      load,
      async () => async () => ({
        meanBatchSize: 12.5,
      }),
    );
    expect(run.metrics).toEqual({ meanBatchSize: 12.5 });
    const failed = await runAgainst(ctx, 'c', 'batched', async () => Promise.reject(new Error('nope')), load);
    expect(failed).toEqual({ label: 'c', target: 'batched', error: 'nope' });
  });
});

describe('withServer', () => {
  function server(log: string[]): ServerHandle {
    return {
      kind: 'streaminfer',
      label: 's',
      pid: 1,
      port: 1,
      baseUrl: 'http://127.0.0.1:1',
      wsUrl: 'ws://127.0.0.1:1/ws',
      adminUrl: 'http://127.0.0.1:2',
      command: ['node', 'x'],
      env: { A: '1' },
      stdoutTail: () => '',
      stderrTail: () => 'boom on stderr',
      cpuMs: () => undefined,
      exited: () => false,
      stop: async () => {
        log.push('stop');
        return { code: 0, signal: null, stopMs: 1, killed: false };
      },
    };
  }

  it('runs the body, then stops the server and keeps its exit', async () => {
    const log: string[] = [];
    const s = await withServer(
      async () => server(log),
      async () => {
        log.push('body');
        return 42;
      },
    );
    expect(log).toEqual(['body', 'stop']);
    expect(s.value).toBe(42);
    expect(s.exit).toEqual({ code: 0, signal: null, stopMs: 1, killed: false });
    expect(s.error).toBeUndefined();
  });

  it('stops the server when the body throws, and reports the error with the stderr tail', async () => {
    const log: string[] = [];
    const s = await withServer(
      async () => server(log),
      async () => {
        throw new Error('lost the clients');
      },
    );
    expect(log).toEqual(['stop']);
    expect(s.value).toBeUndefined();
    expect(s.error).toBe('lost the clients\n--- server stderr (tail) ---\nboom on stderr');
    expect(s.exit?.code).toBe(0);
  });

  it('turns a failed start into an error without a server', async () => {
    let ran = false;
    const s = await withServer(
      async () => Promise.reject(new Error('port taken')),
      async () => {
        ran = true;
      },
    );
    expect(ran).toBe(false);
    expect(s).toEqual({ error: 'port taken', thrown: expect.any(Error) });
  });

  it('stampSharedServer: measured runs get the server record, a failed start becomes a "server" run', async () => {
    const log: string[] = [];
    const runs: RunRecord[] = [
      { label: 'a', target: 't', load: { ok: 1 } as LoadResult },
      { label: 'b', target: 't', error: 'x' },
    ];
    const s = await withServer(
      async () => server(log),
      async () => undefined,
    );
    stampSharedServer(runs, s, { E: '2' }, 't');
    expect(runs[0]!.server).toEqual({ command: ['node', 'x'], env: { E: '2' }, exit: s.exit });
    expect(runs[1]!.server).toBeUndefined();
    const failed: RunRecord[] = [];
    stampSharedServer(failed, { error: 'no start' }, {}, 'normal');
    expect(failed).toEqual([{ label: 'server', target: 'normal', error: 'no start' }]);
    const threw = await withServer(
      async () => server(log),
      async () => {
        throw new Error('bug');
      },
    );
    expect(() => stampSharedServer([], threw, {}, 't')).toThrow('bug');
  });
});
