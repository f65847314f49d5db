/**
 * Persisted registry state: per model the aliases, the canary fraction and the shadow flag, so a restart
 * serves exactly what was served before. Written atomically (temporary file, fsync, rename); a missing or
 * corrupt file falls back to the repository's defaults with a warning, never a crash.
 */
import { closeSync, fsyncSync, mkdirSync, openSync, readFileSync, renameSync, writeSync } from 'node:fs';
import * as path from 'node:path';

export interface ModelState {
  stable: string;
  candidate?: string;
  previousStable?: string;
  canaryPercent: number;
  shadow: boolean;
}

export interface RegistryState {
  defaultModel?: string;
  models: Record<string, ModelState>;
}

export const STATE_FILE = 'registry.json';
const FORMAT = 1;

export function statePath(stateDir: string): string {
  return path.join(stateDir, STATE_FILE);
}

export function saveState(stateDir: string, state: RegistryState): void {
  mkdirSync(stateDir, { recursive: true });
  const target = statePath(stateDir);
  const temporary = `${target}.${process.pid}.tmp`;
  const fd = openSync(temporary, 'w');
  try {
    writeSync(
      fd,
      `${JSON.stringify({ format: FORMAT, savedAt: new Date().toISOString(), ...state }, null, 2)}\n`,
    );
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(temporary, target);
}

/** The saved state, or undefined (with the reason in `warning`) when there is none or it cannot be used. */
export function loadState(stateDir: string): { state?: RegistryState; warning?: string } {
  const file = statePath(stateDir);
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return {};
    return { warning: `cannot read ${file}: ${(error as Error).message}; using the repository defaults` };
  }
  try {
    const parsed = JSON.parse(text) as { format?: unknown; defaultModel?: unknown; models?: unknown };
    if (parsed.format !== FORMAT || typeof parsed.models !== 'object' || parsed.models === null)
      throw new Error('unknown format');
    const models: Record<string, ModelState> = {};
    for (const [name, raw] of Object.entries(parsed.models as Record<string, unknown>)) {
      const entry = raw as Record<string, unknown>;
      if (typeof entry.stable !== 'string') throw new Error(`model ${name}: no stable version`);
      const percent = Number(entry.canaryPercent ?? 0);
      if (!(percent >= 0 && percent <= 100)) throw new Error(`model ${name}: canaryPercent out of range`);
      const state: ModelState = {
        stable: entry.stable,
        canaryPercent: percent,
        shadow: entry.shadow === true,
      };
      if (typeof entry.candidate === 'string') state.candidate = entry.candidate;
      if (typeof entry.previousStable === 'string') state.previousStable = entry.previousStable;
      models[name] = state;
    }
    const state: RegistryState = { models };
    if (typeof parsed.defaultModel === 'string') state.defaultModel = parsed.defaultModel;
    return { state };
  } catch (error) {
    return { warning: `${file} is corrupt (${(error as Error).message}); using the repository defaults` };
  }
}
