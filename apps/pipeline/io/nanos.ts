/** JetStream configures durations in nanoseconds; the rest of the pipeline speaks milliseconds. */
export function nanos(ms: number): number {
  return ms * 1_000_000;
}

export function millisOf(ns: number): number {
  return Math.round(ns / 1_000_000);
}
