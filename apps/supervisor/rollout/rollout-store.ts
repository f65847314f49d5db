/**
 * Where rollouts persist. A single host: `STREAMINFER_STATE_DIR/rollouts.json`, beside the registry state
 * (registry.json), the latest rollout of each model, written like the registry state (temporary file, fsync,
 * rename, fsync of the directory); a missing file is no rollouts, a corrupt one (or record) is skipped with a
 * warning. A fleet: the registry's KV bucket, key `rollout.<model>`, by compare-and-set (cluster/rollout-records.ts),
 * each value naming the host that drives the rollout and when it last wrote (the driver's lease, see
 * rollout-controller.ts).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { writeDurably } from '../../../libs/registry';
import { parseRecord, type RolloutRecord, serializeRecord } from '../../../libs/rollout';
import { FleetError, type RolloutRecords } from '../fleet';
import { RolloutConflictError } from './errors';

export const ROLLOUT_FILE = 'rollouts.json';
const FORMAT = 1;

export interface StoredRollout {
  record: RolloutRecord;
  /** The host that drives it (evaluates and moves it); in a fleet, only it. */
  driver: string;
  /** When the driver last wrote it (ms): a driver silent for long is taken over. */
  beatAt: number;
  /**
   * False while the registry may not hold the routing of a finished rollout yet (rolled back, aborted or
   * promoted, and the registry change not confirmed): whoever drives it tries again, after a restart too.
   */
  settled: boolean;
  revision: number;
}

export interface RolloutStore {
  /** Whether other hosts write here too (a fleet): then only the driver evaluates, the others follow. */
  readonly shared: boolean;
  list(): Promise<{ entries: StoredRollout[]; warnings: string[] }>;
  read(model: string): Promise<StoredRollout | undefined>;
  /** Writes one model's rollout if it is still at `expected` (0: there must be none); returns the new revision. */
  write(
    record: RolloutRecord,
    driver: string,
    beatAt: number,
    settled: boolean,
    expected: number,
  ): Promise<number>;
}

function parseStored(value: unknown, revision: number): StoredRollout {
  const raw = value as { driver?: unknown; beat_at?: unknown; settled?: unknown; record?: unknown };
  if (typeof raw !== 'object' || raw === null) throw new Error('rollout entry: not an object');
  return {
    record: parseRecord(raw.record),
    driver: typeof raw.driver === 'string' ? raw.driver : '',
    beatAt: typeof raw.beat_at === 'number' ? raw.beat_at : 0,
    settled: raw.settled !== false,
    revision,
  };
}

const storedValue = (record: RolloutRecord, driver: string, beatAt: number, settled: boolean) => ({
  driver,
  beat_at: beatAt,
  settled,
  record: serializeRecord(record),
});

/** One host's rollouts in its state directory. One writer (this supervisor): a write never conflicts. */
export class FileRolloutStore implements RolloutStore {
  readonly shared = false;
  private entries: Map<string, StoredRollout> | undefined;
  private warnings: string[] = [];

  /** `onFailure`: a write that failed (counted by the supervisor; the write throws it too). */
  constructor(
    private readonly stateDir: string,
    private readonly onFailure?: (error: unknown) => void,
  ) {}

  get file(): string {
    return path.join(this.stateDir, ROLLOUT_FILE);
  }

  private loaded(): Map<string, StoredRollout> {
    if (this.entries) return this.entries;
    this.entries = new Map();
    let text: string;
    try {
      text = fs.readFileSync(this.file, 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT')
        this.warnings.push(`cannot read ${this.file}: ${(error as Error).message}`);
      return this.entries;
    }
    let parsed: { format?: unknown; rollouts?: unknown };
    try {
      parsed = JSON.parse(text) as typeof parsed;
    } catch (error) {
      this.warnings.push(`${this.file} is corrupt: ${(error as Error).message}`);
      return this.entries;
    }
    if (parsed.format !== FORMAT || !Array.isArray(parsed.rollouts)) {
      this.warnings.push(`${this.file} has an unknown format`);
      return this.entries;
    }
    for (const raw of parsed.rollouts) {
      try {
        const stored = parseStored(raw, 1);
        this.entries.set(stored.record.model, stored);
      } catch (error) {
        this.warnings.push(`${this.file}: ${(error as Error).message}; that rollout is skipped`);
      }
    }
    return this.entries;
  }

  async list(): Promise<{ entries: StoredRollout[]; warnings: string[] }> {
    const entries = [...this.loaded().values()];
    const warnings = this.warnings;
    this.warnings = [];
    return { entries, warnings };
  }

  async read(model: string): Promise<StoredRollout | undefined> {
    return this.loaded().get(model);
  }

  async write(
    record: RolloutRecord,
    driver: string,
    beatAt: number,
    settled: boolean,
    _expected: number,
  ): Promise<number> {
    const entries = this.loaded();
    const revision = (entries.get(record.model)?.revision ?? 0) + 1;
    const next = new Map(entries).set(record.model, { record, driver, beatAt, settled, revision });
    const rollouts = [...next.values()].map((entry) =>
      storedValue(entry.record, entry.driver, entry.beatAt, entry.settled),
    );
    try {
      writeDurably(this.stateDir, ROLLOUT_FILE, `${JSON.stringify({ format: FORMAT, rollouts }, null, 2)}\n`);
    } catch (error) {
      this.onFailure?.(error);
      throw error;
    }
    this.entries = next;
    return revision;
  }
}

/** A fleet's rollouts in its KV bucket (every host reads them; the driver and the operator's host write). */
export class FleetRolloutStore implements RolloutStore {
  readonly shared = true;

  constructor(private readonly records: RolloutRecords) {}

  async list(): Promise<{ entries: StoredRollout[]; warnings: string[] }> {
    const entries: StoredRollout[] = [];
    const warnings: string[] = [];
    for (const entry of await this.records.list()) {
      try {
        entries.push(parseStored(entry.value, entry.revision));
      } catch (error) {
        warnings.push(`fleet rollout of "${entry.model}": ${(error as Error).message}; skipped`);
      }
    }
    return { entries, warnings };
  }

  async read(model: string): Promise<StoredRollout | undefined> {
    const entry = await this.records.read(model);
    return entry ? parseStored(entry.value, entry.revision) : undefined;
  }

  async write(
    record: RolloutRecord,
    driver: string,
    beatAt: number,
    settled: boolean,
    expected: number,
  ): Promise<number> {
    try {
      return await this.records.write(record.model, storedValue(record, driver, beatAt, settled), expected);
    } catch (error) {
      if (error instanceof FleetError && error.code === 'conflict')
        throw new RolloutConflictError(error.message);
      throw error;
    }
  }
}
