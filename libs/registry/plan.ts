/**
 * The host's model table and its transitions, as pure functions: each takes the current table (and what the
 * caller read from the repository or the state file) and returns the next table or a typed rejection. The
 * supervisor does the reading, the logging and the epoch barrier; nothing here touches a file or a process.
 */
import { type ErrorCode, ProtocolError, unknownModel } from '../protocol';
import type { TenantSpec } from '../tenants';
import type { ModelEntry } from './repository';
import type { ModelState, RegistryState } from './state';

/** One model of the table a reload asks for: the versions loaded and the aliases over them. */
export interface ModelPlan {
  name: string;
  /** Versions loaded (always including the aliases below). */
  versions: string[];
  stable: string;
  candidate?: string;
  /** Kept loaded so a rollback is instant. */
  previousStable?: string;
  /** 0..100: share of unpinned requests sent to the candidate. */
  canaryPercent?: number;
  /** Mirror stable-served requests to the candidate and compare. */
  shadow?: boolean;
}

export interface TablePlan {
  models: ModelPlan[];
  defaultModel: string;
  /**
   * The node settings that can change while serving. Carried by every plan the supervisor makes, checked at
   * PREPARE and applied at COMMIT (or at the end of a node's roll), so a configuration reload goes through the
   * same barrier as a model reload and a roll-back restores the previous settings.
   */
  settings?: NodeSettings;
  /**
   * What this host could not load (its files, never the fleet's): not in `models`, answered `model_unavailable`
   * by name. Host-side like `settings`: the supervisor adds it to every plan it hands its nodes.
   */
  unavailable?: UnavailableModel[];
}

/** A model (version absent) or one version of it that failed to load on this host, and why. */
export interface UnavailableModel {
  model: string;
  version?: string;
  reason: string;
}

/** What a configuration reload changes on a running node (the rest of a node's start options is fixed). */
export interface NodeSettings {
  batch: {
    policy: 'fixed' | 'greedy' | 'adaptive';
    maxBatchSize: number;
    maxQueueDelayMs: number;
    /** When the operator set the batch size, timeout or policy explicitly, it overrides every model's config.json. */
    explicitSize: boolean;
    explicitTimeout: boolean;
    explicitPolicy: boolean;
    /** The operator's objective (ms): set, it overrides every model's `slo_p99_ms`. */
    sloP99Ms?: number;
  };
  maxPayloadBytes: number;
  requestTimeoutMs: number;
  backpressure: {
    rateLimitRps: number;
    rateLimitBurst: number;
    modelErrorPenalty: number;
    maxInflightPerClient: number;
    maxModelQueue: number;
    slowConsumerWarnBytes: number;
    slowConsumerCloseBytes: number;
    trustForwardedFor: boolean;
    /** Canonical CIDR list (libs/config); undefined: no proxy is trusted (unless trustForwardedFor). */
    trustedProxies: string | undefined;
    rateLimitKey: 'connection' | 'ip';
    maxConnections: number;
    maxConnectionsPerIp: number;
    maxProtocolErrorsPerSecond: number;
    maxRateLimitedPerSecond: number;
    errorCoalesceMs: number;
  };
  shutdownTimeoutMs: number;
  logLevel: string;
  /** Tenants of the API keys file (`--api-keys`), re-read on every configuration reload; absent: anonymous. */
  tenants?: readonly TenantSpec[];
  /** The data port's TLS (absent: plain http/ws); see NodeTls. */
  tls?: NodeTls;
}

/**
 * The data port's certificate files (absolute paths), with the fingerprints they had when checked: a file
 * swapped on disk under the same name is a change, so a reload re-reads it on every node.
 */
export interface NodeTls {
  certFile: string;
  keyFile: string;
  clientCaFile?: string;
  certFingerprint: string;
  clientCaFingerprint?: string;
}

/** What the plan needs of a repository scan: each model's versions and config.json's default. */
export type RepositoryModel = Pick<ModelEntry, 'name' | 'versions' | 'defaultVersion'>;

/** A transition that cannot be made: the typed error the API answers with; the table stays as it is. */
export type Planned<T> = { ok: true; value: T } | { ok: false; error: ProtocolError };

const accept = <T>(value: T): Planned<T> => ({ ok: true, value });
const reject = <T>(code: ErrorCode, message: string): Planned<T> => ({
  ok: false,
  error: new ProtocolError(code, message),
});

/**
 * The table the repository asks for: every version loaded, stable = config.json's default_version. With
 * `current`, a rescan keeps what the API chose while the repository allows it: a stable version survives unless
 * config.json's default moved since `lastDefaults` was taken, and candidate, canary, shadow and the previous
 * stable survive while the versions they name exist.
 */
export function repositoryPlan(
  entries: readonly RepositoryModel[],
  defaultModel: string,
  current?: TablePlan,
  lastDefaults: ReadonlyMap<string, string> = new Map(),
): TablePlan {
  return {
    defaultModel,
    models: entries.map((entry) => {
      const kept = current?.models.find((model) => model.name === entry.name);
      const versions = entry.versions.map((version) => version.version);
      const stable =
        kept && versions.includes(kept.stable) && lastDefaults.get(entry.name) === entry.defaultVersion
          ? kept.stable
          : entry.defaultVersion;
      const plan: ModelPlan = { name: entry.name, versions, stable };
      if (kept?.candidate && versions.includes(kept.candidate)) {
        plan.candidate = kept.candidate;
        plan.canaryPercent = kept.canaryPercent ?? 0;
        plan.shadow = kept.shadow ?? false;
      }
      if (kept?.previousStable && versions.includes(kept.previousStable))
        plan.previousStable = kept.previousStable;
      return plan;
    }),
  };
}

/** Something the caller should log about a plan it got (a saved state partly ignored, and why). */
export interface PlanNotice {
  level: 'info' | 'warn';
  details: Record<string, unknown>;
  message: string;
}

/**
 * Applies the persisted registry state (default model, aliases, canary, shadow) to the repository's plan. The
 * saved default model wins unless the operator changed the configured one since it was saved, or the model is
 * gone; a model whose saved state names a version that is gone keeps the repository's defaults.
 */
export function withSavedState(
  plan: TablePlan,
  saved: RegistryState,
  configuredDefaultModel: string,
): { plan: TablePlan; notices: PlanNotice[] } {
  const notices: PlanNotice[] = [];
  let defaultModel = plan.defaultModel;
  if (saved.defaultModel !== undefined && saved.defaultModel !== plan.defaultModel) {
    const details = { saved: saved.defaultModel, configured: configuredDefaultModel };
    if (
      saved.configuredDefaultModel !== undefined &&
      saved.configuredDefaultModel !== configuredDefaultModel
    ) {
      notices.push({
        level: 'info',
        details,
        message: 'the configured default model changed since the state was saved; using the configured one',
      });
    } else if (!plan.models.some((model) => model.name === saved.defaultModel)) {
      notices.push({
        level: 'warn',
        details,
        message: 'saved default model is not in the repository; using the configured one',
      });
    } else defaultModel = saved.defaultModel;
  }
  const models = plan.models.map((model) => {
    const state = saved.models[model.name];
    if (!state) return model;
    const missing = [state.stable, state.candidate, state.previousStable].filter(
      (v) => v !== undefined && !model.versions.includes(v),
    );
    if (missing.length > 0) {
      notices.push({
        level: 'warn',
        details: { model: model.name, missing },
        message:
          'saved registry state names versions that are gone; using the repository defaults for this model',
      });
      return model;
    }
    const next: ModelPlan = {
      ...model,
      stable: state.stable,
      canaryPercent: state.canaryPercent,
      shadow: state.shadow,
    };
    if (state.candidate !== undefined) next.candidate = state.candidate;
    if (state.previousStable !== undefined) next.previousStable = state.previousStable;
    return next;
  });
  return { plan: { ...plan, defaultModel, models }, notices };
}

/** The registry state to persist for a table (what `withSavedState` reads back at the next start). */
export function registryStateOf(plan: TablePlan, configuredDefaultModel: string): RegistryState {
  const state: RegistryState = { defaultModel: plan.defaultModel, configuredDefaultModel, models: {} };
  for (const model of plan.models) {
    const entry: ModelState = {
      stable: model.stable,
      canaryPercent: model.canaryPercent ?? 0,
      shadow: model.shadow ?? false,
    };
    if (model.candidate !== undefined) entry.candidate = model.candidate;
    if (model.previousStable !== undefined) entry.previousStable = model.previousStable;
    state.models[model.name] = entry;
  }
  return state;
}

/** The model of that name in the table, or `unknown_model` naming those there are. */
export function findModel(table: TablePlan, name: string): Planned<ModelPlan> {
  const model = table.models.find((candidate) => candidate.name === name);
  return model
    ? accept(model)
    : {
        ok: false,
        error: unknownModel(
          name,
          table.models.map((m) => m.name),
        ),
      };
}

/** The table with one model replaced by `next` (same name). */
export function withModel(table: TablePlan, next: ModelPlan): TablePlan {
  return { ...table, models: table.models.map((model) => (model.name === next.name ? next : model)) };
}

/** The registry actions of the admin API (POST /api/models/{name}/{action}). */
export const REGISTRY_ACTIONS = ['candidate', 'canary', 'shadow', 'promote', 'rollback'] as const;
export type RegistryAction = (typeof REGISTRY_ACTIONS)[number];

/** A registry change as the API asks for it, its fields checked for type (bounds are the transition's). */
export type RegistryChange =
  | { action: 'candidate'; version: string }
  | { action: 'canary'; percent: number }
  | { action: 'shadow'; enabled: boolean }
  | { action: 'promote' }
  | { action: 'rollback' };

const PERCENT_RULE = '"percent" must be a number from 0 to 100';

/** Reads a registry action's JSON body: `bad_request` when a field is missing or of the wrong type. */
export function registryChange(
  action: RegistryAction,
  body: Record<string, unknown>,
): Planned<RegistryChange> {
  switch (action) {
    case 'candidate': {
      const version = typeof body.version === 'number' ? String(body.version) : body.version;
      if (typeof version !== 'string' || version.length === 0)
        return reject('bad_request', '"version" must name a version');
      return accept({ action, version });
    }
    case 'canary':
      return typeof body.percent === 'number'
        ? accept({ action, percent: body.percent })
        : reject('bad_request', PERCENT_RULE);
    case 'shadow':
      return typeof body.enabled === 'boolean'
        ? accept({ action, enabled: body.enabled })
        : reject('bad_request', '"enabled" must be true or false');
    case 'promote':
    case 'rollback':
      return accept({ action });
  }
}

/**
 * The model after a registry change. candidate: `version` (one of `found`, the repository's versions of the
 * model) is loaded beside stable, with canary 0 and shadow off. canary / shadow: need a candidate. promote: the
 * candidate becomes stable, the old stable stays loaded as the previous one. rollback: stable goes back to the
 * previous stable, which stayed loaded (a commit without loading). Without a candidate, canary and shadow are
 * off.
 */
export function registryTransition(
  model: ModelPlan,
  change: RegistryChange,
  found: readonly string[] = [],
): Planned<ModelPlan> {
  const name = model.name;
  let next: ModelPlan;
  switch (change.action) {
    case 'candidate': {
      const version = change.version;
      if (!found.includes(version))
        return reject(
          'unknown_version',
          `model "${name}" has no version "${version}"; found ${found.join(', ')}`,
        );
      next = {
        ...model,
        versions: [...new Set([...model.versions, version])],
        candidate: version,
        canaryPercent: 0,
        shadow: false,
      };
      break;
    }
    case 'canary': {
      const percent = change.percent;
      if (!Number.isFinite(percent) || percent < 0 || percent > 100)
        return reject('bad_request', PERCENT_RULE);
      if (model.candidate === undefined)
        return reject('bad_request', `model "${name}" has no candidate: deploy one first`);
      next = { ...model, canaryPercent: percent };
      break;
    }
    case 'shadow': {
      if (change.enabled && model.candidate === undefined)
        return reject('bad_request', `model "${name}" has no candidate: deploy one first`);
      next = { ...model, shadow: change.enabled };
      break;
    }
    case 'promote': {
      if (model.candidate === undefined)
        return reject('bad_request', `model "${name}" has no candidate to promote`);
      next = {
        name,
        versions: model.versions,
        stable: model.candidate,
        previousStable: model.stable,
        canaryPercent: 0,
        shadow: false,
      };
      break;
    }
    case 'rollback': {
      if (model.previousStable === undefined)
        return reject('bad_request', `model "${name}" has no previous stable version to roll back to`);
      next = {
        ...model,
        stable: model.previousStable,
        previousStable: model.stable,
        versions: [...new Set([...model.versions, model.previousStable])],
      };
      if (next.candidate === next.stable) next.candidate = undefined;
      break;
    }
  }
  if (next.candidate === undefined) {
    delete next.candidate;
    next.canaryPercent = 0;
    next.shadow = false;
  }
  return accept(next);
}

/**
 * `reload --model M --version V`: V becomes M's stable (loaded if needed; `found` is the repository's versions of
 * M). atomic keeps the old stable loaded as the previous one; rolling swaps in place, so only V stays loaded. A
 * model not in the table yet is added.
 */
export function versionReloadPlan(
  current: TablePlan,
  model: string,
  version: string,
  found: readonly string[],
  strategy: 'atomic' | 'rolling',
): Planned<TablePlan> {
  if (!found.includes(version))
    return reject(
      'unknown_version',
      `model "${model}" has no version "${version}" in the repository; found ${found.join(', ')}`,
    );
  if (!current.models.some((m) => m.name === model))
    return accept({
      defaultModel: current.defaultModel,
      models: [...current.models, { name: model, versions: [version], stable: version }],
    });
  return accept({
    defaultModel: current.defaultModel,
    models: current.models.map((m) =>
      m.name !== model
        ? m
        : strategy === 'rolling'
          ? { name: m.name, versions: [version], stable: version }
          : {
              ...m,
              versions: [...new Set([...m.versions, version])],
              stable: version,
              ...(m.stable !== version ? { previousStable: m.stable } : {}),
            },
    ),
  });
}

/** `reload --model M`: M becomes the default model (it must be in the table). */
export function defaultModelPlan(current: TablePlan, model: string): Planned<TablePlan> {
  const found = findModel(current, model);
  return found.ok ? accept({ ...current, defaultModel: model }) : found;
}

/**
 * A rescan (SIGHUP, `reload`): the repository's table keeping the API's choices; the default model must exist
 * (or be one of `unavailable`: in the repository, but it does not load).
 */
export function rescanPlan(
  entries: readonly RepositoryModel[],
  defaultModel: string,
  current: TablePlan,
  lastDefaults: ReadonlyMap<string, string>,
  unavailable: readonly string[] = [],
): Planned<TablePlan> {
  const plan = repositoryPlan(entries, defaultModel, current, lastDefaults);
  if (
    !plan.models.some((model) => model.name === plan.defaultModel) &&
    !unavailable.includes(plan.defaultModel)
  )
    return reject('unknown_model', `default model "${plan.defaultModel}" is not in the repository`);
  return accept(plan);
}

/**
 * The table without what failed to load (`failed`: versions, or whole models when version is absent), so the
 * rest is served. A model whose stable failed keeps its last good version: the previous stable when it loaded,
 * else the newest version that did (versions are in the repository's order). A failed candidate is dropped
 * with its canary and shadow; a model with no version left leaves the table. The default model stays named
 * even when it is gone: requests naming none are answered `model_unavailable`. `unavailable` lists `failed`.
 */
export function withoutFailed(plan: TablePlan, failed: readonly UnavailableModel[]): TablePlan {
  const models: ModelPlan[] = [];
  for (const model of plan.models) {
    if (failed.some((entry) => entry.model === model.name && entry.version === undefined)) continue;
    const bad = new Set(
      failed.flatMap((entry) =>
        entry.model === model.name && entry.version !== undefined ? [entry.version] : [],
      ),
    );
    const versions = model.versions.filter((version) => !bad.has(version));
    if (versions.length === 0) continue;
    const next: ModelPlan = { ...model, versions };
    if (bad.has(model.stable)) {
      next.stable =
        model.previousStable !== undefined && versions.includes(model.previousStable)
          ? model.previousStable
          : versions[versions.length - 1]!;
      if (next.previousStable === next.stable) delete next.previousStable;
    }
    if (next.previousStable !== undefined && !versions.includes(next.previousStable))
      delete next.previousStable;
    if (
      next.candidate !== undefined &&
      (!versions.includes(next.candidate) || next.candidate === next.stable)
    ) {
      delete next.candidate;
      next.canaryPercent = 0;
      next.shadow = false;
    }
    models.push(next);
  }
  return { ...plan, models, unavailable: [...failed] };
}

/** The plan with the node settings it runs with: those asked for, else the current table's, else its own. */
export function withSettings(plan: TablePlan, current: TablePlan, settings?: NodeSettings): TablePlan {
  return { ...plan, settings: settings ?? current.settings ?? plan.settings };
}
