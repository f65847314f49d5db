/**
 * The one place product code reads the `STREAMINFER_TEST_*` variables (test/repo/layers.test.ts holds every
 * other file to that). `STREAMINFER_TEST_HOOKS=1` turns the test hooks on; each delay below is honoured only
 * where its caller checks that the hooks are on. None of these is a setting: libs/config does not describe
 * them and production never sets them.
 */

/** The delays a test can inject, by the suffix of their variable (`STREAMINFER_TEST_<name>`, milliseconds). */
export type TestDelay =
  /** A node's epoch hold bound (apps/node/request-path.ts). */
  | 'HOLD_MS'
  /** A restarted node waits this long before loading its models (apps/node/main.ts). */
  | 'RESTART_LOAD_DELAY_MS'
  /** A node holds every PREPARE of a reload this long (apps/node/main.ts). */
  | 'HOLD_PREPARE_MS'
  /** A node holds the window between a successful prepare and the commit (apps/node/main.ts). */
  | 'COMMIT_DELAY_MS'
  /** A fleet coordinator holds its commit point (apps/supervisor/fleet/fleet-change.ts). */
  | 'FLEET_COMMIT_DELAY_MS'
  /** The pipeline pauses between a checkpoint's object and its pointer (apps/pipeline/io/checkpoints.ts). */
  | 'CHECKPOINT_DELAY_MS';

/** `STREAMINFER_TEST_HOOKS=1`: the process runs with its test hooks on. */
export function testHooksEnabled(env: NodeJS.ProcessEnv = process.env): boolean {
  return env.STREAMINFER_TEST_HOOKS === '1';
}

/** The delay a test asked for, read when called; 0 when unset, NaN when not a number (callers act on > 0). */
export function testDelayMs(name: TestDelay, env: NodeJS.ProcessEnv = process.env): number {
  return Number(env[`STREAMINFER_TEST_${name}`] ?? 0);
}
