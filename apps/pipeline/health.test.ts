/** /health's verdict as a pure function: what makes it 503 (not consuming) and what makes it stale. */
import { assessHealth, type HealthInput } from './health';

const NOW = Date.UTC(2026, 11, 2, 1, 0, 0);

function input(over: Partial<HealthInput> = {}): HealthInput {
  return {
    state: 'running',
    now: NOW,
    natsDownSince: null,
    partitionsTotal: 2,
    liveInstances: 1,
    partitions: [
      { partition: 0, consuming: true, unprocessed: 0, oldest_unprocessed_age_s: 0 },
      { partition: 1, consuming: true, unprocessed: 0, oldest_unprocessed_age_s: 0 },
    ],
    failed: [],
    recentFreshnessP95Ms: 40,
    slo: { freshnessP95Ms: 2000, lagMessages: 300 },
    ...over,
  };
}

describe('assessHealth', () => {
  it('running, connected, every partition worked and fresh: consuming and not stale', () => {
    expect(assessHealth(input())).toEqual({
      consuming: true,
      not_consuming: [],
      stale: false,
      stale_reasons: [],
    });
    // Nothing published lately is not stale by itself (an idle input).
    expect(assessHealth(input({ recentFreshnessP95Ms: Number.NaN })).stale).toBe(false);
  });

  it('not consuming: broker down, a failed partition, a partition without a consumer, one nobody owns', () => {
    const down = assessHealth(input({ natsDownSince: NOW - 4500 }));
    expect(down.consuming).toBe(false);
    expect(down.not_consuming).toEqual(['NATS connection down for 4.5 s (reconnecting)']);
    const failed = assessHealth(
      input({
        partitions: [{ partition: 1, consuming: true, unprocessed: 0, oldest_unprocessed_age_s: 0 }],
        failed: [{ partition: 0, reason: 'checkpoint pointer x: not JSON' }],
      }),
    );
    expect(failed.not_consuming).toEqual(['partition 0 failed: checkpoint pointer x: not JSON']);
    const idle = assessHealth(
      input({
        partitions: [{ partition: 0, consuming: false, unprocessed: 0, oldest_unprocessed_age_s: 0 }],
      }),
    );
    expect(idle.not_consuming).toEqual([
      'no live consumer on partition 0',
      'partition 1 not owned (this instance is the only live one)',
    ]);
    // Beside other live instances, a partition it does not own is someone else's.
    const shared = assessHealth(
      input({
        liveInstances: 2,
        partitions: [{ partition: 0, consuming: true, unprocessed: 0, oldest_unprocessed_age_s: 0 }],
      }),
    );
    expect(shared.consuming).toBe(true);
    expect(assessHealth(input({ state: 'draining' })).not_consuming).toEqual(['pipeline is draining']);
  });

  it('stale: a backlog fetched but not processed, an old unprocessed event, old recent predictions', () => {
    const backlog = assessHealth(
      input({
        partitions: [
          { partition: 0, consuming: true, unprocessed: 374, oldest_unprocessed_age_s: 0.5 },
          { partition: 1, consuming: true, unprocessed: 374, oldest_unprocessed_age_s: 0.4 },
        ],
      }),
    );
    expect(backlog.stale_reasons).toEqual(['748 events unprocessed > 300 (slo.lagMessages)']);
    expect(backlog.consuming).toBe(true);
    const stalled = assessHealth(
      input({
        partitions: [
          { partition: 0, consuming: true, unprocessed: 3, oldest_unprocessed_age_s: 25 },
          { partition: 1, consuming: true, unprocessed: 0, oldest_unprocessed_age_s: 0 },
        ],
      }),
    );
    expect(stalled.stale_reasons).toEqual(['oldest unprocessed event 25.0 s old > 2000 ms']);
    expect(assessHealth(input({ recentFreshnessP95Ms: 4200 })).stale_reasons).toEqual([
      'freshness p95 4200 ms > 2000 ms',
    ]);
  });
});
