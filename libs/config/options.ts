/**
 * Checks of a component's numeric options, run before any I/O so a bad value fails at start, not on the first
 * message. The caller names its own typed error (`fail`): the fleet and the pipeline each throw theirs.
 */
export function requirePositiveInt(
  name: string,
  value: number,
  min: number,
  fail: (message: string) => Error,
): number {
  if (!Number.isInteger(value) || value < min)
    throw fail(`${name} must be an integer >= ${min} (got ${value})`);
  return value;
}
