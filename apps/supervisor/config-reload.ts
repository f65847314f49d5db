/**
 * The configuration in force on this host, and its reload (SIGHUP, `reload --config`, POST /api/reload with
 * "config"): resolved again from the file with the start's flags and environment still winning, the live
 * settings staged for the reload that runs them through the epoch barrier, and installed once it commits. The
 * supervisor-side settings (admin token and certificate, log level, tenants, trusted keys) follow from here.
 */
import type { Logger } from 'pino';
import { type AdminPolicy, type AdminSecrets, AdminSetupError, parseAllowedOrigins } from '../../libs/admin';
import type { ConfigChange, ServerConfig, SettingKey } from '../../libs/config';
import { ConfigError, planConfigChange, resolveConfigDetailed } from '../../libs/config';
import { ProtocolError } from '../../libs/protocol';
import type { NodeSettings, NodeTls } from '../../libs/registry';
import type { TrustedKeys } from '../../libs/signing';
import type { TenantSpec } from '../../libs/tenants';
import { loadTls } from '../node/tls-files';
import { serverAdminSecrets } from './admin/admin-api';
import type { ReloadOutcome, ReloadStrategy } from './coordinator';
import { ReloadBusyError } from './errors';
import { readTenantFile } from './tenant-shares';
import { readTrustedKeys } from './trusted-keys';

/** What the configuration in force starts from (the supervisor's options; a committed reload replaces them). */
export interface StartConfig {
  config: ServerConfig;
  explicitBatchSize: boolean;
  explicitBatchTimeout: boolean;
  explicitBatchPolicy: boolean;
  /** What the configuration was resolved from at start: a configuration reload resolves again with them. */
  sources?: { flags: Record<string, unknown>; env: Record<string, string | undefined>; filePath?: string };
  /** The data port's certificate files as checked at start (apps/node/tls-files.ts); absent: plain. */
  tls?: NodeTls;
  /** The API keys file's tenants, read and validated at start (`apiKeysFile`); absent: anonymous clients. */
  tenants?: readonly TenantSpec[];
  /** The admin token and TLS files as read at start (serverAdminSecrets; the CLI reads them before it forks). */
  admin?: AdminSecrets;
}

/** Batch settings the operator gave explicitly: they override every model's config.json. */
export interface ExplicitBatch {
  size: boolean;
  timeout: boolean;
  policy: boolean;
}

/** A table reload as a configuration reload asks for it. */
export interface SettingsReloadRequest {
  defaultModel?: string;
  settings: NodeSettings;
  strategy?: ReloadStrategy;
}

/** What the configuration reload needs of the host. */
export interface ConfigReloadHost {
  /** The reload the host's barrier runs now, if any (a configuration reload is refused meanwhile). */
  running(): { id: number; reason: string } | undefined;
  /** Runs the reload the new configuration asks for (on this host, or through the fleet). */
  reload(request: SettingsReloadRequest, reason: string): Promise<ReloadOutcome>;
  /** A committed configuration's tenants and admin secrets, for those that hold them. */
  applied(tenants: readonly TenantSpec[] | undefined, secrets: AdminSecrets): void;
}

/** The configuration a running configuration reload installs once it commits. */
interface PendingConfig {
  config: ServerConfig;
  explicit: ExplicitBatch;
  applied: string[];
  restartRequired: string[];
  tls: NodeTls | undefined;
  /** Said in the outcome: TLS files that did not pass (the certificate served stays). */
  warning: string | undefined;
  tenants: readonly TenantSpec[] | undefined;
  secrets: AdminSecrets;
}

const TLS_FILE_SETTINGS: readonly SettingKey[] = ['tlsCert', 'tlsKey', 'tlsClientCa'];

export class ConfigReload {
  /** The configuration the processes were started with (fixes what a configuration reload can change). */
  private readonly startedConfig: ServerConfig;
  /** --trusted-keys as last read: what model versions pulled from the fleet must be signed by. */
  private trustedKeysNow: TrustedKeys | undefined;
  /** The tenants in force (the API keys file as the last committed configuration read it). */
  private tenantsNow: readonly TenantSpec[] | undefined;
  private secretsNow: AdminSecrets;
  private pending: PendingConfig | undefined;

  /** `start` is updated in place when a reload commits (what restarted nodes and the supervisor read). */
  constructor(
    private readonly start: StartConfig,
    private readonly logger: Logger,
    private readonly host: ConfigReloadHost,
  ) {
    // A bad trusted-keys file stops the start here (the CLI exits 2 with the file named).
    this.readTrustedKeys(start.config, 'start');
    this.startedConfig = start.config;
    this.tenantsNow = start.tenants;
    this.secretsNow = start.admin ?? serverAdminSecrets(start.config, (message) => logger.warn(message));
  }

  get trustedKeys(): TrustedKeys | undefined {
    return this.trustedKeysNow;
  }

  get tenants(): readonly TenantSpec[] | undefined {
    return this.tenantsNow;
  }

  get secrets(): AdminSecrets {
    return this.secretsNow;
  }

  get adminPolicy(): AdminPolicy {
    return {
      ...(this.secretsNow.token !== undefined ? { token: this.secretsNow.token } : {}),
      allowedOrigins: parseAllowedOrigins(this.start.config.adminAllowedOrigins),
    };
  }

  /** The configured default model a save records: a running configuration reload's (applied once it commits). */
  get configuredDefaultModel(): string {
    return (this.pending?.config ?? this.start.config).defaultModel;
  }

  private explicitBatch(): ExplicitBatch {
    return {
      size: this.start.explicitBatchSize,
      timeout: this.start.explicitBatchTimeout,
      policy: this.start.explicitBatchPolicy,
    };
  }

  /** The node settings a configuration asks for (see NodeSettings: what a configuration reload changes). */
  nodeSettings(
    config: ServerConfig = this.start.config,
    explicit: ExplicitBatch = this.explicitBatch(),
    tls: NodeTls | undefined = this.start.tls,
    tenants: readonly TenantSpec[] | undefined = this.tenantsNow,
  ): NodeSettings {
    return {
      ...(tenants ? { tenants } : {}),
      batch: {
        policy: config.batchPolicy,
        maxBatchSize: config.batchSize,
        maxQueueDelayMs: config.batchTimeoutMs,
        explicitSize: explicit.size,
        explicitTimeout: explicit.timeout,
        explicitPolicy: explicit.policy,
        // unset by default: set at all is explicit
        ...(config.sloP99Ms !== undefined ? { sloP99Ms: config.sloP99Ms } : {}),
      },
      maxPayloadBytes: config.maxPayloadBytes,
      requestTimeoutMs: config.requestTimeoutMs,
      backpressure: {
        rateLimitRps: config.rateLimitRps,
        rateLimitBurst: config.rateLimitBurst,
        modelErrorPenalty: config.modelErrorPenalty,
        maxInflightPerClient: config.maxInflightPerClient,
        maxModelQueue: config.maxModelQueue,
        slowConsumerWarnBytes: config.slowConsumerWarnBytes,
        slowConsumerCloseBytes: config.slowConsumerCloseBytes,
        trustForwardedFor: config.trustForwardedFor,
        trustedProxies: config.trustedProxies,
        rateLimitKey: config.rateLimitKey,
        maxConnections: config.maxConnections,
        maxConnectionsPerIp: config.maxConnectionsPerIp,
        maxProtocolErrorsPerSecond: config.maxProtocolErrorsPerSecond,
        maxRateLimitedPerSecond: config.maxRateLimitedPerSecond,
        errorCoalesceMs: config.errorCoalesceMs,
      },
      shutdownTimeoutMs: config.shutdownTimeoutMs,
      logLevel: config.logLevel,
      ...(tls ? { tls } : {}),
    };
  }

  /**
   * Resolves the configuration again from `file` (the config file's content), with the flags and environment
   * given at start still winning over it; applies every live setting on every node through the epoch barrier,
   * together with a re-read of the model repository; names the settings that need a restart (in the log and in
   * the outcome). An invalid configuration changes nothing.
   */
  async reload(
    file: unknown,
    filePath: string | undefined,
    reason: string,
    strategy?: ReloadStrategy,
  ): Promise<ReloadOutcome> {
    const sources = this.start.sources ?? { flags: {}, env: {} };
    let resolved: ReturnType<typeof resolveConfigDetailed>;
    try {
      resolved = resolveConfigDetailed({
        flags: sources.flags,
        env: sources.env,
        ...(file !== undefined ? { file } : {}),
        ...(filePath !== undefined ? { filePath } : {}),
      });
      // The trusted keys are this host's, not the fleet table's: they rotate at once, even when the reload that
      // follows is refused (busy) or fails elsewhere in the fleet.
      this.readTrustedKeys(resolved.config, reason);
    } catch (error) {
      const message = error instanceof ConfigError ? error.message : (error as Error).message;
      this.logger.error({ reason, err: message }, 'configuration rejected; still serving the previous one');
      throw new ProtocolError('bad_request', message);
    }
    // Refused before anything is staged: the pending configuration belongs to the reload that runs next.
    const running = this.host.running();
    if (running) throw new ReloadBusyError(running);
    for (const warning of resolved.warnings) this.logger.warn({ reason }, warning);
    const change = planConfigChange(this.start.config, resolved.config, this.startedConfig);
    // Token and TLS files are read again (rotation): one that cannot be used rejects the configuration.
    let secrets: AdminSecrets;
    try {
      secrets = serverAdminSecrets(change.next, (message) => this.logger.warn({ reason }, message));
    } catch (error) {
      if (!(error instanceof AdminSetupError)) throw error;
      this.logger.error(
        { reason, err: error.message },
        'configuration rejected; still serving the previous one',
      );
      throw new ProtocolError('bad_request', error.message);
    }
    const explicit: ExplicitBatch = {
      size: resolved.origins.batchSize !== 'default',
      timeout: resolved.origins.batchTimeoutMs !== 'default',
      policy: resolved.origins.batchPolicy !== 'default',
    };
    // The API keys file is read again on every configuration reload: a bad one keeps the tenants in force.
    let tenants: readonly TenantSpec[] | undefined;
    try {
      tenants = change.next.apiKeysFile === undefined ? undefined : readTenantFile(change.next.apiKeysFile);
    } catch (error) {
      const message = (error as Error).message;
      this.logger.error(
        { reason, err: message },
        'API keys file rejected; still serving the previous tenants',
      );
      throw new ProtocolError('bad_request', message);
    }
    if (change.restartRequired.length > 0)
      this.logger.warn(
        { reason, restart_required: change.restartRequired },
        'configuration reload: these settings take effect only after a restart',
      );
    const tls = this.reloadedTls(change, resolved.origins, reason);
    this.pending = {
      config: change.next,
      explicit,
      applied: change.applied,
      restartRequired: change.restartRequired,
      tls: tls.tls,
      warning: tls.warning,
      tenants,
      secrets,
    };
    try {
      const request: SettingsReloadRequest = {
        settings: this.nodeSettings(change.next, explicit, tls.tls, tenants),
      };
      // The configured default model applies when the configuration changed it; otherwise the one being
      // served stays (it may come from `reload --model`).
      if (change.applied.includes('defaultModel')) request.defaultModel = change.next.defaultModel;
      if (strategy) request.strategy = strategy;
      const outcome = await this.host.reload(request, reason);
      // A fleet reload answers with the fleet's outcome: this host's TLS warning joins it here.
      if (tls.warning && !outcome.warnings?.includes(tls.warning))
        outcome.warnings = [...(outcome.warnings ?? []), tls.warning];
      return outcome;
    } finally {
      this.pending = undefined;
    }
  }

  /**
   * A reload's outcome, while a configuration reload runs: says what it applied and what needs a restart, and
   * once it did not fail installs the configuration (what restarted nodes get, and the supervisor's own).
   */
  settle(outcome: ReloadOutcome): void {
    const pending = this.pending;
    if (!pending) return;
    outcome.config = {
      applied: outcome.result === 'failed' ? [] : pending.applied,
      restartRequired: pending.restartRequired,
    };
    if (pending.warning) outcome.warnings = [...(outcome.warnings ?? []), pending.warning];
    if (outcome.result === 'failed') return;
    // Supervisor-side settings (admin token, log level, step timeout) and what restarted nodes get.
    this.start.config = pending.config;
    this.start.explicitBatchSize = pending.explicit.size;
    this.start.explicitBatchTimeout = pending.explicit.timeout;
    this.start.explicitBatchPolicy = pending.explicit.policy;
    if (pending.tls) this.start.tls = pending.tls;
    else delete this.start.tls;
    this.logger.level = pending.config.logLevel;
    // The nodes hold the new tenants since COMMIT: their shares follow at once. The token and certificate read
    // for this reload: new connections get the certificate, open ones keep theirs.
    this.tenantsNow = pending.tenants;
    this.secretsNow = pending.secrets;
    this.host.applied(pending.tenants, pending.secrets);
  }

  /** Reads `config.trustedKeysFile` (throws SigningKeyError naming it; the keys held stay) and logs what it holds. */
  private readTrustedKeys(config: ServerConfig, reason: string): void {
    const file = config.trustedKeysFile;
    if (file === undefined) {
      if (this.trustedKeysNow !== undefined)
        this.logger.warn(
          { reason },
          'fleet: trusted keys unset; pulled artifacts are checked by checksum only',
        );
      this.trustedKeysNow = undefined;
      return;
    }
    this.trustedKeysNow = readTrustedKeys(file);
    this.logger.info({ reason, file, keys: [...this.trustedKeysNow.keys()] }, 'fleet: trusted keys read');
    if (config.cluster === undefined)
      this.logger.warn(
        { file },
        'trusted keys are set but this host is not in a fleet (--cluster): nothing is pulled',
      );
  }

  /**
   * Every configuration reload re-reads the data port's certificate files (the same names, or new ones), so a
   * certificate renewed on disk reaches the nodes (a new fingerprint is a changed setting). Files that do not
   * pass change nothing: the nodes keep the certificate they serve, the file settings keep their running
   * values, and the outcome says why in its warnings. TLS turned on or off waits for a restart.
   */
  private reloadedTls(
    change: ConfigChange,
    origins: ReturnType<typeof resolveConfigDetailed>['origins'],
    reason: string,
  ): { tls: NodeTls | undefined; warning?: string } {
    const running = this.start.tls;
    if (change.next.tlsCert === undefined || change.restartRequired.includes('tlsCert'))
      return { tls: running };
    try {
      const loaded = loadTls(change.next, Date.now(), origins);
      for (const warning of loaded!.warnings) this.logger.warn({ reason }, warning);
      return { tls: loaded!.tls };
    } catch (error) {
      const message = (error as Error).message;
      this.logger.error(
        { reason, err: message },
        'TLS files rejected; the nodes keep serving the previous certificate',
      );
      const next = change.next as unknown as Record<string, unknown>;
      for (const key of TLS_FILE_SETTINGS) next[key] = this.start.config[key];
      change.applied = change.applied.filter((key) => !TLS_FILE_SETTINGS.includes(key));
      return {
        tls: running,
        warning: `TLS certificate not reloaded: ${message}; still serving the previous one`,
      };
    }
  }
}
