import { rng } from '../event-time/engine.test-util';
import { DeliveryDecider, type DeliveryDeciderOptions } from './decider';
import { play as playStep, type Step, steps } from './decider.test-util';
import { simulate } from './simulator';

function options(): DeliveryDeciderOptions {
  return {
    outOfOrdernessMs: 15_000,
    allowedLatenessMs: 60_000,
    idleTimeoutMs: 10_000,
    stateTtlMs: 12 * 60_000,
    dedupeTtlMs: 12 * 60_000,
  };
}

const runOf = (seed: number, deliveries: number, minutes: number) =>
  steps({ seed, deliveries, minutes, gapMs: [5, 10], cycle: [900, 100] });
const play = (decider: DeliveryDecider, step: Step) => playStep(decider, step, 'all');

describe('SnapshotJob: an incremental snapshot taken while events go on', () => {
  test.each([
    [11, 1],
    [13, 9],
  ])(
    'seed %i, %i keys per step: the text is snapshot() at the start, and a restore from it decides as the run did',
    (seed, perStep) => {
      const run = runOf(seed, 12, 24);
      const live = new DeliveryDecider(options());
      const random = rng(seed * 7);
      const cuts = [
        Math.floor(run.length * 0.3),
        Math.floor(run.length * 0.6),
        Math.floor(run.length * 0.85),
      ];
      const outputs: string[] = [];
      const checks: { cut: number; text: string; expected: string }[] = [];
      let i = 0;
      for (const cut of cuts) {
        for (; i < cut; i++) {
          outputs.push(play(live, run[i]!));
        }
        const expected = JSON.stringify(live.snapshot());
        const job = live.beginSnapshot();
        expect(job.remaining).toBeGreaterThan(10);
        // Events (with their window firings, expiries, alerts) between steps, as the pipeline does.
        while (!job.step(perStep)) {
          const n = 1 + Math.floor(random() * 20);
          for (let k = 0; k < n && i < run.length; k++, i++) {
            outputs.push(play(live, run[i]!));
          }
        }
        checks.push({ cut: i, text: job.finish(), expected });
      }
      for (; i < run.length; i++) {
        outputs.push(play(live, run[i]!));
      }
      // The uninterrupted run: no jobs, pruning when it falls due.
      const plain = new DeliveryDecider(options());
      const reference = run.map((s) => {
        return play(plain, s);
      });
      expect(outputs).toEqual(reference);
      // Pruning deferred by the jobs caught up step by step: the same state as the run that pruned on time.
      expect(JSON.stringify(live.snapshot())).toBe(JSON.stringify(plain.snapshot()));
      for (const check of checks) {
        expect(JSON.parse(check.text)).toEqual(JSON.parse(check.expected));
      }
      // A restore from the job's text, fed what came after the job started, decides as the run did.
      const first = cuts[0]!;
      const restored = new DeliveryDecider(options(), JSON.parse(checks[0]!.text));
      const replay = run.slice(first).map((s) => {
        return play(restored, s);
      });
      expect(replay).toEqual(reference.slice(first));
    },
  );

  test('keys unchanged since the last job are taken from its text; a changed key is captured again', () => {
    const decider = new DeliveryDecider(options());
    const run = runOf(21, 8, 6);
    for (const s of run) {
      play(decider, s);
    }
    const first = decider.beginSnapshot().finish();
    // Nothing happened: the same text.
    expect(decider.beginSnapshot().finish()).toBe(first);
    expect(first).toBe(JSON.stringify(decider.snapshot()));
    // One more event for one delivery: the next text is the new snapshot().
    const { records } = simulate({ seed: 22, deliveries: 1, durationMs: 60_000, gpsIntervalMs: 5_000 });
    decider.ingest(records[0]!.payload, 'p0');
    const next = decider.beginSnapshot().finish();
    expect(next).not.toBe(first);
    expect(next).toBe(JSON.stringify(decider.snapshot()));
  });

  test('one job at a time; cancel ends it and a new one can start', () => {
    const decider = new DeliveryDecider(options());
    const job = decider.beginSnapshot();
    expect(() => decider.beginSnapshot()).toThrow('already');
    job.cancel();
    expect(decider.beginSnapshot().finish()).toBe(JSON.stringify(decider.snapshot()));
  });
});
