/**
 * Where a single host keeps its rollouts: `STREAMINFER_STATE_DIR/rollouts.json`, beside the registry state
 * (registry.json), the latest rollout of each model. Written like the registry state: temporary file, fsync,
 * rename, fsync of the directory. A missing file is no rollouts; a corrupt one (or a corrupt record in it) is
 * skipped with a warning, never a crash.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { parseRecord, type RolloutRecord, serializeRecord } from '../../libs/rollout';

export const ROLLOUT_FILE = 'rollouts.json';
const FORMAT = 1;

export interface RolloutStore {
  load(): { records: RolloutRecord[]; warnings: string[] };
  save(records: readonly RolloutRecord[]): void;
}

export class FileRolloutStore implements RolloutStore {
  constructor(private readonly stateDir: string) {}

  get file(): string {
    return path.join(this.stateDir, ROLLOUT_FILE);
  }

  load(): { records: RolloutRecord[]; warnings: string[] } {
    let text: string;
    try {
      text = fs.readFileSync(this.file, 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return { records: [], warnings: [] };
      return { records: [], warnings: [`cannot read ${this.file}: ${(error as Error).message}`] };
    }
    let parsed: { format?: unknown; rollouts?: unknown };
    try {
      parsed = JSON.parse(text) as typeof parsed;
    } catch (error) {
      return { records: [], warnings: [`${this.file} is corrupt: ${(error as Error).message}`] };
    }
    if (parsed.format !== FORMAT || !Array.isArray(parsed.rollouts))
      return { records: [], warnings: [`${this.file} has an unknown format`] };
    const records: RolloutRecord[] = [];
    const warnings: string[] = [];
    for (const raw of parsed.rollouts) {
      try {
        records.push(parseRecord(raw));
      } catch (error) {
        warnings.push(`${this.file}: ${(error as Error).message}; that rollout is skipped`);
      }
    }
    return { records, warnings };
  }

  save(records: readonly RolloutRecord[]): void {
    fs.mkdirSync(this.stateDir, { recursive: true });
    const temporary = `${this.file}.${process.pid}.tmp`;
    const fd = fs.openSync(temporary, 'w');
    try {
      fs.writeSync(
        fd,
        `${JSON.stringify({ format: FORMAT, rollouts: records.map(serializeRecord) }, null, 2)}\n`,
      );
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    fs.renameSync(temporary, this.file);
    const dir = fs.openSync(this.stateDir, 'r');
    try {
      fs.fsyncSync(dir);
    } finally {
      fs.closeSync(dir);
    }
  }
}
