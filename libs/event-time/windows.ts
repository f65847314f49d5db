/** Window arithmetic. Windows are aligned to the epoch: starts are multiples of the step. */

/** Start of the last window that contains `t`. */
export function lastStartOf(t: number, stepMs: number): number {
  return Math.floor(t / stepMs) * stepMs;
}

/** End of the last window that contains `t`: once that window has closed, `t` can change nothing. */
export function lastEndOf(t: number, sizeMs: number, stepMs: number): number {
  return lastStartOf(t, stepMs) + sizeMs;
}

/** Starts of every window containing `t`, oldest first. */
export function windowStartsFor(t: number, sizeMs: number, stepMs: number): number[] {
  const starts: number[] = [];
  for (let s = lastStartOf(t, stepMs); s > t - sizeMs; s -= stepMs) starts.push(s);
  return starts.reverse();
}
