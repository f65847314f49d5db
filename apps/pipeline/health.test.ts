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
    spool: null,
    sideOutputsHeld: 0,
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
      degraded: [],
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

  it('degraded, still consuming: side outputs in the spool, a full spool, side outputs held', () => {
    const spool = {
      records: 3,
      bytes: 1200,
      maxBytes: 8_388_608,
      full: false,
      oldestAt: NOW - 42_000,
      lastError: 'Error: no responders',
    };
    const spooled = assessHealth(input({ spool }));
    expect(spooled.consuming).toBe(true);
    expect(spooled.stale).toBe(false);
    expect(spooled.degraded).toEqual([
      '3 side outputs (1200 bytes, oldest 42 s) in the local spool: the broker refuses them (Error: no responders); published with their Msg-Ids once it takes them',
    ]);
    // An empty spool says nothing.
    expect(
      assessHealth(input({ spool: { ...spool, records: 0, bytes: 0, oldestAt: null } })).degraded,
    ).toEqual([]);
    const full = assessHealth(
      input({ spool: { ...spool, bytes: 8_388_000, full: true }, sideOutputsHeld: 2 }),
    );
    expect(full.consuming).toBe(true);
    expect(full.degraded.slice(1)).toEqual([
      'side-output spool full (8388000 of 8388608 bytes): further ones hold their partitions',
      '2 side outputs not stored, holding their partitions (retried with backoff)',
    ]);
  });
});
