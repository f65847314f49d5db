import { Session } from 'node:inspector';

/** Bounds of `GET /api/profile?seconds=N`: long enough for a load step, short enough not to be left running. */
export const PROFILE_SECONDS = { min: 1, max: 120, default: 10 } as const;

/**
 * A CPU profile of this process's main thread (V8's sampling profiler through node:inspector, the format
 * Chrome DevTools and `node --cpu-prof` write), taken on demand: the pipeline runs under a supervisor, where
 * `--cpu-prof` cannot be passed (NODE_OPTIONS refuses it). One at a time per process.
 */
export class CpuProfiler {
  private busy = false;

  get running(): boolean {
    return this.busy;
  }

  /** Samples for `seconds` and resolves with the profile's JSON text; undefined while another is running. */
  async profile(seconds: number, sampleIntervalUs = 1000): Promise<string | undefined> {
    if (this.busy) return undefined;
    this.busy = true;
    const session = new Session();
    const post = (method: string, params?: object) =>
      new Promise<unknown>((resolve, reject) =>
        session.post(method, params ?? {}, (err, result) => (err ? reject(err) : resolve(result))),
      );
    try {
      session.connect();
      await post('Profiler.enable');
      await post('Profiler.setSamplingInterval', { interval: sampleIntervalUs });
      await post('Profiler.start');
      await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
      const { profile } = (await post('Profiler.stop')) as { profile: unknown };
      return JSON.stringify(profile);
    } finally {
      session.disconnect();
      this.busy = false;
    }
  }
}

/** `seconds` from the query string: an integer in PROFILE_SECONDS, or the reason it is refused. */
export function profileSeconds(query: string): number | string {
  const raw = new URLSearchParams(query).get('seconds');
  if (raw === null || raw === '') return PROFILE_SECONDS.default;
  const n = Number(raw);
  if (!/^\d{1,3}$/.test(raw) || n < PROFILE_SECONDS.min || n > PROFILE_SECONDS.max)
    return `seconds must be an integer from ${PROFILE_SECONDS.min} to ${PROFILE_SECONDS.max}`;
  return n;
}
