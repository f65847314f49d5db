/**
 * Persisted registry state: per model the aliases, the canary fraction and the shadow flag, plus the default
 * model, so a restart serves exactly what was served before. Written atomically (temporary file, fsync,
 * rename, fsync of the directory so the rename itself survives a power loss); a missing or corrupt file falls
 * back to the repository's defaults with a warning, never a crash. A write that fails (a full disk, a read-only
 * one) removes its temporary file, keeps the previous file as it was, and throws a typed error naming the file:
 * `storage_full` (ENOSPC, EDQUOT) or `persist_failed` (anything else).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { ProtocolError } from '../protocol';

export interface ModelState {
  stable: string;
  candidate?: string;
  previousStable?: string;
  canaryPercent: number;
  shadow: boolean;
}

export interface RegistryState {
  /** The default model being served (absent in files written before it was persisted). */
  defaultModel?: string;
  /** STREAMINFER_MODEL_NAME when it was saved: a changed setting wins over the saved default at start. */
  configuredDefaultModel?: string;
  models: Record<string, ModelState>;
}

/** The file-system calls saveState makes (injectable, so tests can see the directory fsync). */
export type StateFs = Pick<
  typeof fs,
  'mkdirSync' | 'openSync' | 'writeSync' | 'fsyncSync' | 'closeSync' | 'renameSync' | 'unlinkSync'
>;

export const STATE_FILE = 'registry.json';
const FORMAT = 1;

export function statePath(stateDir: string): string {
  return path.join(stateDir, STATE_FILE);
}

export function saveState(stateDir: string, state: RegistryState, io: StateFs = fs): void {
  writeDurably(
    stateDir,
    STATE_FILE,
    `${JSON.stringify({ format: FORMAT, savedAt: new Date().toISOString(), ...state }, null, 2)}\n`,
    io,
  );
}

/** The errno codes of a device or quota with no room left. */
const NO_ROOM = new Set(['ENOSPC', 'EDQUOT']);

/**
 * Writes `dir/name` atomically and durably: temporary file, fsync, rename, fsync of the directory. On failure
 * the temporary file is removed and the previous file stays; the error is `storage_full` or `persist_failed`.
 */
export function writeDurably(dir: string, name: string, text: string, io: StateFs = fs): void {
  const target = path.join(dir, name);
  const temporary = `${target}.${process.pid}.tmp`;
  let written = false;
  try {
    io.mkdirSync(dir, { recursive: true });
    const fd = io.openSync(temporary, 'w');
    try {
      io.writeSync(fd, text);
      io.fsyncSync(fd);
    } finally {
      io.closeSync(fd);
    }
    io.renameSync(temporary, target);
    written = true;
    // The rename is an update of the directory: without this fsync a crash can bring the old file back.
    const handle = io.openSync(dir, 'r');
    try {
      io.fsyncSync(handle);
    } finally {
      io.closeSync(handle);
    }
  } catch (error) {
    // A temporary file left behind would keep the space a full disk needs back.
    if (!written) {
      try {
        io.unlinkSync(temporary);
      } catch {
        // never created, or already gone
      }
    }
    const code = (error as NodeJS.ErrnoException).code ?? '';
    throw new ProtocolError(
      NO_ROOM.has(code) ? 'storage_full' : 'persist_failed',
      `cannot save ${target}: ${(error as Error).message}`,
    );
  }
}

/** The saved state, or undefined (with the reason in `warning`) when there is none or it cannot be used. */
export function loadState(stateDir: string): { state?: RegistryState; warning?: string } {
  const file = statePath(stateDir);
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return {};
    return { warning: `cannot read ${file}: ${(error as Error).message}; using the repository defaults` };
  }
  try {
    const parsed = JSON.parse(text) as {
      format?: unknown;
      defaultModel?: unknown;
      configuredDefaultModel?: unknown;
      models?: unknown;
    };
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
    // Files written before the default model was persisted have neither field: the configured one applies.
    if (typeof parsed.defaultModel === 'string') state.defaultModel = parsed.defaultModel;
    if (typeof parsed.configuredDefaultModel === 'string')
      state.configuredDefaultModel = parsed.configuredDefaultModel;
    return { state };
  } catch (error) {
    return { warning: `${file} is corrupt (${(error as Error).message}); using the repository defaults` };
  }
}
