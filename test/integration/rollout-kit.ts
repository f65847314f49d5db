/** What the rollout integration tests share: a light steady load of digits requests, and reading a rollout. */
import { digits } from '../models/data';
import { sleep, WsClient } from './harness';

export const pixels = (row: number): number[] =>
  Array.from(digits().pixels.subarray(row * 64, row * 64 + 64));

export type View = Record<string, unknown> & {
  state: string;
  step: number;
  share: number;
  reason: string | null;
  step_started_at: string;
  transitions: { from: string; to: string; reason: string }[];
  checks: { name: string; verdict: string; value: number | null; consecutive_failures: number }[];
};

/** A light, steady load: `clients` connections, each one request at a time with a short pause. */
export class Load {
  private running = true;
  readonly versions: string[] = [];
  private readonly done: Promise<void>;

  constructor(wsUrl: string, clients = 2, pauseMs = 4) {
    this.done = Promise.all(
      Array.from({ length: clients }, async (_, c) => {
        const client = await WsClient.connect(wsUrl);
        let i = c * 500;
        while (this.running) {
          const answer = await client.request({ id: i, model: 'digits', input: pixels(i % 1797) });
          if (answer.version) this.versions.push(answer.version);
          i++;
          await sleep(pauseMs);
        }
        client.close();
      }),
    ).then(() => undefined);
  }

  async stop(): Promise<void> {
    this.running = false;
    await this.done;
  }
}

export async function rollout(url: string, model = 'digits'): Promise<{ status: number; view: View }> {
  const response = await fetch(`${url}/api/models/${model}/rollout`);
  const body = (await response.json()) as { rollout: View };
  return { status: response.status, view: body.rollout };
}

/** Polls the rollout until `done` holds (or fails with the last view). */
export async function waitFor(url: string, done: (view: View) => boolean, timeoutMs = 20000): Promise<View> {
  const deadline = Date.now() + timeoutMs;
  let last: View | undefined;
  while (Date.now() < deadline) {
    last = (await rollout(url)).view;
    if (last && done(last)) return last;
    await sleep(100);
  }
  throw new Error(`rollout did not get there in ${timeoutMs} ms: ${JSON.stringify(last)}`);
}

/** The model's stable alias as `GET /api/models` says it, once it is `version` (or the last seen after 5 s). */
export async function stableOf(url: string, version: string, model = 'digits'): Promise<string | undefined> {
  const deadline = Date.now() + 5000;
  let stable: string | undefined;
  while (Date.now() < deadline) {
    const listing = (await (await fetch(`${url}/api/models`)).json()) as {
      models: { name: string; aliases: Record<string, string> }[];
    };
    stable = listing.models.find((m) => m.name === model)?.aliases.stable;
    if (stable === version) break;
    await sleep(100);
  }
  return stable;
}

/** A rollout of digits v1 fast enough for a test (0.5 s evaluations, 2 s dwell), gated by error rate only. */
export const quickPlan = (steps: number[]): Record<string, unknown> => ({
  version: '1',
  steps,
  dwell_s: 2,
  min_requests: 10,
  interval_s: 0.5,
  min_samples: 20,
  checks: { error_rate: { max_increase: 0.2 } },
});
