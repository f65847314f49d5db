/**
 * This host's model repository (with the fleet's pull cache) as it can be served, and what of it does not
 * load: models whose config.json cannot be read, and versions that failed to load, listed unavailable (health,
 * metrics, admission's `model_unavailable`) and left out of later scans until their file changes.
 */
import { statSync } from 'node:fs';
import * as path from 'node:path';
import type { Logger } from 'pino';
import { Counter, Gauge, type Registry } from 'prom-client';
import type { ServerConfig } from '../../libs/config';
import { ProtocolError, unknownModel } from '../../libs/protocol';
import {
  type ModelEntry,
  readModel,
  scanRepositoryDetailed,
  type TablePlan,
  type UnavailableModel,
  withoutFailed,
} from '../../libs/registry';
import type { NodeChannel } from './coordinator';
import { pullCacheDir } from './fleet';

export class HostRepository {
  /** What this host's repository holds that does not load (config.json unreadable, a version that failed). */
  private unavailableNow: UnavailableModel[] = [];
  /** Versions that failed to load, by `model/version`: the file's size and mtime then (a changed file is retried). */
  private readonly failedFiles = new Map<string, string>();
  /** config.json's default version per model at the last scan: a rescan keeps an API-chosen stable unless it moved. */
  private readonly lastDefaults = new Map<string, string>();
  private readonly loadFailuresTotal: Counter<'model' | 'version'>;
  private readonly unavailableGauge: Gauge<'model' | 'version'>;

  /** `config`: the configuration in force; `served`: the host's table (what an unknown name is told of). */
  constructor(
    private readonly config: () => ServerConfig,
    private readonly served: () => TablePlan,
    private readonly logger: Logger,
    registry: Registry,
  ) {
    this.loadFailuresTotal = new Counter({
      name: 'streaminfer_model_load_failures_total',
      help: 'Models (version "*": its config.json) and versions of the repository that failed to load, counted when found.',
      labelNames: ['model', 'version'],
      registers: [registry],
    });
    this.unavailableGauge = new Gauge({
      name: 'streaminfer_model_unavailable',
      help: 'A model (version "*") or version of the repository that is not served because it failed to load (1 while so).',
      labelNames: ['model', 'version'],
      registers: [registry],
    });
  }

  /** Where versions pulled from the fleet are written and read: `<stateDir>/models` (see fetchInto). */
  get cacheDir(): string {
    return pullCacheDir(this.config().stateDir);
  }

  /** What this host could not load, served to no one. */
  get unavailable(): readonly UnavailableModel[] {
    return this.unavailableNow;
  }

  /** config.json's default version per model at the last scan (rescanPlan keeps a stable the API chose). */
  get defaults(): ReadonlyMap<string, string> {
    return this.lastDefaults;
  }

  /**
   * The repository (with the pull cache) as it can be served: models whose config.json cannot be read, and
   * versions that failed to load before from the same file (size and mtime), are left out and listed unavailable.
   * With --strict-models any unreadable model stops the start (and fails a rescan).
   */
  scan(): ModelEntry[] {
    const config = this.config();
    const scan = scanRepositoryDetailed(path.resolve(config.modelsDir), this.cacheDir);
    if (config.strictModels && scan.broken.length > 0)
      throw new Error(`--strict-models: ${scan.broken.map((model) => model.reason).join('; ')}`);
    const failed: UnavailableModel[] = scan.broken.map((model) => ({
      model: model.name,
      reason: model.reason,
    }));
    const models = scan.models.map((entry) => {
      const versions = entry.versions.filter((version) => {
        const key = `${entry.name}/${version.version}`;
        const stamp = this.failedFiles.get(key);
        if (stamp === undefined) return true;
        if (stamp !== fileStamp(version.file)) {
          this.failedFiles.delete(key);
          return true;
        }
        const before = this.unavailableNow.find(
          (u) => u.model === entry.name && u.version === version.version,
        );
        failed.push({
          model: entry.name,
          version: version.version,
          reason: before?.reason ?? 'did not load',
        });
        return false;
      });
      return { ...entry, versions };
    });
    this.markUnavailable(failed);
    return models.filter((entry) => entry.versions.length > 0);
  }

  /** The host's unavailable list from now on: new entries logged and counted, the gauge set. */
  private markUnavailable(failed: readonly UnavailableModel[]): void {
    const key = (entry: UnavailableModel): string => `${entry.model}/${entry.version ?? '*'}`;
    const before = new Set(this.unavailableNow.map(key));
    for (const entry of failed) {
      if (before.has(key(entry))) continue;
      this.loadFailuresTotal.inc({ model: entry.model, version: entry.version ?? '*' });
      this.logger.error(
        { model: entry.model, version: entry.version ?? null, reason: entry.reason },
        entry.version === undefined
          ? 'model unavailable: it cannot be read; serving the others'
          : 'model version unavailable: it did not load; serving the rest',
      );
    }
    this.unavailableNow = [...failed];
    this.unavailableGauge.reset();
    for (const entry of failed)
      this.unavailableGauge.set({ model: entry.model, version: entry.version ?? '*' }, 1);
  }

  /**
   * What a starting node could not load, left out of `table` (withoutFailed: the last good version stays
   * stable) and listed unavailable; refused when nothing of the repository would be left.
   */
  leaveOut(
    node: number,
    failures: readonly UnavailableModel[],
    table: TablePlan,
  ): { ok: true; table: TablePlan } | { ok: false; error: string } {
    for (const failure of failures) if (failure.version !== undefined) this.rememberFailed(failure);
    const failed = [...this.unavailableNow, ...failures];
    const next = withoutFailed(table, failed);
    if (next.models.length === 0)
      return {
        ok: false,
        error: `${failed.map((f) => f.reason).join('; ')} (no model of the repository loads)`,
      };
    this.markUnavailable(failed);
    this.logger.warn(
      { node, unavailable: failed.map((f) => `${f.model}/${f.version ?? '*'}`) },
      'serving the host table without what did not load',
    );
    return { ok: true, table: next };
  }

  /** A version that did not load, by its file now: left out of rescans until the file changes. */
  private rememberFailed(failed: UnavailableModel): void {
    const file = this.versionFile(failed.model, failed.version!);
    if (file !== undefined) this.failedFiles.set(`${failed.model}/${failed.version}`, fileStamp(file));
  }

  private versionFile(model: string, version: string): string | undefined {
    try {
      return this.readEntry(model).versions.find((entry) => entry.version === version)?.file;
    } catch {
      return undefined;
    }
  }

  /**
   * A node's PREPARE that failed on a version that did not load: the version is listed unavailable (health,
   * metrics) and, from the same file, left out of later rescans (an explicit version reload tries it again).
   */
  watchPrepare(channel: NodeChannel): NodeChannel {
    return {
      ...channel,
      prepare: async (plan) => {
        const answer = await channel.prepare(plan);
        const failed = (answer.data as { failed?: UnavailableModel } | undefined)?.failed;
        if (!answer.ok && failed?.version !== undefined) {
          this.rememberFailed(failed);
          const others = this.unavailableNow.filter(
            (u) => u.model !== failed.model || u.version !== failed.version,
          );
          this.markUnavailable([...others, failed]);
        }
        return answer;
      },
    };
  }

  /** A plan as this host's nodes get it: with what this host could not load (host-side, like its settings). */
  hostSide(plan: TablePlan): TablePlan {
    const next = { ...plan };
    if (this.unavailableNow.length > 0) next.unavailable = [...this.unavailableNow];
    else delete next.unavailable;
    return next;
  }

  rememberDefaults(entries: readonly ModelEntry[]): void {
    for (const entry of entries) this.lastDefaults.set(entry.name, entry.defaultVersion);
  }

  /** One model as the repository holds it now: `unknown_model` when it is in neither, `bad_request` when unreadable. */
  readEntry(name: string): ModelEntry {
    try {
      return readModel(
        path.join(path.resolve(this.config().modelsDir), name),
        name,
        path.join(this.cacheDir, name),
      );
    } catch (error) {
      const current = this.served().models.map((m) => m.name);
      if (!current.includes(name)) throw unknownModel(name, current);
      throw new ProtocolError('bad_request', (error as Error).message);
    }
  }
}

/** A version file as it was when it failed to load: a new file under the same name is tried again. */
function fileStamp(file: string): string {
  try {
    const stat = statSync(file);
    return `${stat.size}:${stat.mtimeMs}`;
  } catch {
    return 'gone';
  }
}
