import { deliveryEngine, gps, MIN, type Payload, rng, SEC, T0, traffic } from './engine.test-util';
import type { EngineOutput, ResultOutput, StreamEvent } from './index';

const BOUND = 30 * SEC; // deliveryOptions' outOfOrdernessMs
const LATENESS = 2 * MIN; // deliveryOptions' allowedLatenessMs

/** A random multi-key, multi-partition stream in event-time order. */
function stream(seed: number, count: number): StreamEvent<Payload>[] {
  const random = rng(seed);
  const events: StreamEvent<Payload>[] = [];
  let t = T0;
  for (let i = 0; i < count; i++) {
    t += Math.floor(random() * 4 * SEC);
    const key = `d${Math.floor(random() * 12)}`;
    const partition = `p${Math.floor(random() * 3)}`;
    events.push(
      random() < 0.15
        ? traffic(`t${i}`, key, t, partition)
        : gps(`g${i}`, key, t, Math.floor(random() * 5000), partition),
    );
  }
  return events;
}

/** Arrival order: each event displaced by a seeded jitter in [0, maxDelay]. */
function disorder(events: readonly StreamEvent<Payload>[], seed: number, maxDelay: number) {
  const random = rng(seed);
  return events
    .map((e, i) => ({ e, i, arrival: e.eventTime + Math.floor(random() * (maxDelay + 1)) }))
    .sort((a, b) => a.arrival - b.arrival || a.i - b.i)
    .map((x) => x.e);
}

function run(events: readonly StreamEvent<Payload>[]): EngineOutput<Payload, unknown>[] {
  const engine = deliveryEngine();
  const effects = events.flatMap((e) => engine.ingest(e));
  return effects.concat(engine.flush());
}

function resultsOf(effects: readonly EngineOutput<Payload, unknown>[]) {
  return effects
    .filter((e): e is ResultOutput<unknown> => e.kind === 'result')
    .map(({ watermark: _ignored, ...rest }) => rest);
}

/** Last revision of each window. */
function finalResults(effects: readonly EngineOutput<Payload, unknown>[]) {
  const last = new Map<string, unknown>();
  for (const r of resultsOf(effects)) last.set(`${r.key}|${r.window}|${r.start}`, [r.result, r.eventCount]);
  return new Map([...last.entries()].sort((a, b) => (a[0] < b[0] ? -1 : 1)));
}

describe('arrival order does not change results (seeded)', () => {
  const SEEDS = 20;
  const EVENTS = 1500;

  it('any permutation within the out-of-orderness bound gives the same results, in the same order, with no revision or late event', () => {
    let windows = 0;
    let displaced = 0;
    for (let seed = 1; seed <= SEEDS; seed++) {
      const events = stream(seed, EVENTS);
      const arrival = disorder(events, seed * 7919, BOUND);
      displaced += arrival.filter((e, i) => e !== events[i]).length;
      const expected = run(events);
      const actual = run(arrival);
      expect(actual.filter((e) => e.kind === 'late' || e.kind === 'duplicate')).toEqual([]);
      expect(resultsOf(actual).every((r) => r.revision === 0)).toBe(true);
      expect(resultsOf(actual)).toEqual(resultsOf(expected));
      windows += resultsOf(expected).length;
    }
    expect(displaced).toBeGreaterThan(SEEDS * EVENTS * 0.5);
    console.log(
      `bound permutations: ${SEEDS} seeds × ${EVENTS} events, ${displaced} displaced, ${windows} windows equal`,
    );
  });

  it('within bound + allowed lateness, the final revision of every window equals in-order arrival', () => {
    let revisions = 0;
    for (let seed = 1; seed <= SEEDS; seed++) {
      const events = stream(seed, EVENTS);
      const arrival = disorder(events, seed * 104729, BOUND + LATENESS);
      const expected = run(events);
      const actual = run(arrival);
      expect(actual.filter((e) => e.kind === 'late')).toEqual([]);
      expect(finalResults(actual)).toEqual(finalResults(expected));
      revisions += resultsOf(actual).filter((r) => r.revision > 0).length;
    }
    expect(revisions).toBeGreaterThan(0);
    console.log(
      `lateness permutations: ${SEEDS} seeds × ${EVENTS} events, ${revisions} revisions, finals equal`,
    );
  });

  it('duplicates interleaved anywhere change no result: each one is a duplicate effect', () => {
    const events = stream(99, EVENTS);
    const random = rng(4242);
    const withDuplicates: StreamEvent<Payload>[] = [];
    let duplicates = 0;
    for (const e of disorder(events, 31, BOUND)) {
      withDuplicates.push(e);
      if (random() < 0.05) {
        withDuplicates.push({ ...e });
        duplicates++;
      }
    }
    const actual = run(withDuplicates);
    expect(actual.filter((e) => e.kind === 'duplicate')).toHaveLength(duplicates);
    expect(resultsOf(actual)).toEqual(resultsOf(run(events)));
  });
});

describe('lateness is a function of the event and the watermark (seeded)', () => {
  const SEEDS = 10;
  const EVENTS = 1500;

  /** Arrival order with some events held back up to 12 min: many end beyond the allowed lateness. */
  function withStragglers(events: readonly StreamEvent<Payload>[], seed: number) {
    const random = rng(seed);
    return events
      .map((e, i) => ({
        e,
        i,
        arrival: e.eventTime + Math.floor(random() * (random() < 0.1 ? 12 * MIN : BOUND)),
      }))
      .sort((a, b) => a.arrival - b.arrival || a.i - b.i)
      .map((x) => x.e);
  }

  it('an event is late exactly when the watermark the events before it made is more than allowedLatenessMs past it', () => {
    let late = 0;
    let accepted = 0;
    for (let seed = 1; seed <= SEEDS; seed++) {
      const arrival = withStragglers(stream(seed, EVENTS), seed * 13);
      const engine = deliveryEngine();
      // The contract's watermark, from the events alone: per partition max event time − bound; a partition is
      // left out once the others' events ran idleTimeoutMs (10 s) past the event clock at its last event.
      const max = new Map<string, number>();
      const seenAt = new Map<string, number>();
      let clock = Number.NEGATIVE_INFINITY;
      let wm = Number.NEGATIVE_INFINITY;
      for (const e of arrival) {
        const own = engine.ingest(e)[0]!;
        expect([e.eventId, own.kind]).toEqual([e.eventId, wm - e.eventTime > LATENESS ? 'late' : 'accepted']);
        if (own.kind === 'late') late++;
        else accepted++;
        clock = Math.max(clock, e.eventTime);
        max.set(e.partition, Math.max(max.get(e.partition) ?? e.eventTime, e.eventTime));
        seenAt.set(e.partition, clock);
        const active = [...max].filter(([p]) => clock - seenAt.get(p)! < 10 * SEC).map(([, m]) => m - BOUND);
        wm = Math.max(wm, Math.min(...active));
        expect(engine.watermark()).toBe(wm);
      }
    }
    expect(late).toBeGreaterThan(SEEDS * 20);
    expect(accepted).toBeGreaterThan(SEEDS * EVENTS * 0.8);
    console.log(
      `lateness: ${SEEDS} seeds × ${EVENTS} events, ${late} late, ${accepted} accepted, each as the contract says`,
    );
  });

  it('the same stream shifted by any offset meets the same dispositions (the window grid does not decide)', () => {
    const random = rng(77);
    for (let seed = 1; seed <= SEEDS; seed++) {
      const arrival = withStragglers(stream(seed, EVENTS), seed * 17);
      const kinds = (shift: number) => {
        const engine = deliveryEngine();
        return arrival.map((e) => engine.ingest({ ...e, eventTime: e.eventTime + shift })[0]!.kind);
      };
      expect(kinds(1 + Math.floor(random() * 5 * MIN))).toEqual(kinds(0));
    }
  });
});
