/** Failed partitions: the retry backoff is bounded, each attempt is one log line, the metric follows. */
import pino from 'pino';
import { FailedPartitions, RETRY_MAX_MS, retryDelayMs } from './failed-partitions';
import { PipelineMetrics } from './metrics';

describe('FailedPartitions', () => {
  it('backs off 1 s, 2 s, 4 s … and never beyond 60 s', () => {
    expect([1, 2, 3, 4, 5, 6, 7, 8, 30].map(retryDelayMs)).toEqual([
      1000, 2000, 4000, 8000, 16_000, 32_000, 60_000, 60_000, 60_000,
    ]);
    expect(retryDelayMs(1000)).toBe(RETRY_MAX_MS);
  });

  it('reports the partition failed (metric, status, one log line per attempt) until cleared', async () => {
    jest.useFakeTimers();
    try {
      const lines: string[] = [];
      const logger = pino({ level: 'error' }, { write: (line: string) => lines.push(line) });
      const metrics = new PipelineMetrics();
      let now = 1_000_000;
      const retries: number[] = [];
      const failed = new FailedPartitions(
        metrics.partitions,
        logger,
        () => now,
        (p) => {
          retries.push(p);
          failed.fail(p, 'checkpoint pointer: not JSON');
        },
      );
      failed.fail(3, 'checkpoint pointer: not JSON');
      expect(await metrics.registry.getSingleMetricAsString('streaminfer_stream_partition_failed')).toContain(
        'streaminfer_stream_partition_failed{partition="3"} 1',
      );
      // 60 s of a checkpoint that never reads: attempts at 1, 3, 7, 15, 31 s — not thousands.
      for (let t = 0; t < 60; t++) {
        now += 1000;
        jest.advanceTimersByTime(1000);
      }
      expect(retries.length).toBe(5);
      expect(lines.length).toBe(6);
      expect(failed.list()).toEqual([
        expect.objectContaining({
          partition: 3,
          state: 'failed',
          attempts: 6,
          reason: 'checkpoint pointer: not JSON',
        }),
      ]);
      failed.clear(3);
      expect(failed.list()).toEqual([]);
      expect(
        await metrics.registry.getSingleMetricAsString('streaminfer_stream_partition_failed'),
      ).not.toContain('partition="3"');
    } finally {
      jest.useRealTimers();
    }
  });
});
