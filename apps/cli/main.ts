#!/usr/bin/env node
/** `streaminfer` command line: serve, status, reload, models, fleet, bench, simulate, stream. */
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import { Command, Option } from 'commander';
import pino from 'pino';
import { type AdminSecrets, AdminSetupError } from '../../libs/admin';
import { ConfigError, describeSettings, resolveConfigDetailed } from '../../libs/config';
import { type BenchModelOptions, benchModel } from '../../libs/inference';
import { type NatsAuth, NatsAuthError } from '../../libs/nats-auth';
import { testHooksEnabled } from '../../libs/test-hooks';
import { assertNativeUws } from '../../libs/uws';
import { type LoadedTls, loadTls } from '../node/tls-files';
import { serverAdminSecrets } from '../supervisor/admin/admin-api';
import { ClusterError } from '../supervisor/fleet';
import { loadClusterNats } from '../supervisor/fleet/fleet-join';
import { SystemdNotifier } from '../supervisor/notify';
import { Supervisor } from '../supervisor/supervisor';
import { readTenantFile } from '../supervisor/tenant-shares';
import { type AdminFlags, adminTarget, ClientError, callServer } from './client';
import { formatBenchModel } from './commands/bench-model';
import { registerModelsKeygen } from './commands/models-keygen';
import { registerModelsPush } from './commands/models-push';
import { registerRollout } from './commands/rollout';
import { registerSimulate } from './commands/simulate';
import { registerStatus } from './commands/status';
import { registerStream } from './commands/stream';
import type { HealthAnswer } from './status-view';

const program = new Command();
program
  .name('streaminfer')
  .description('Real-time ML inference server: WebSocket streaming, batching, backpressure, hot-swap.')
  .showHelpAfterError();

/** commander option name → config key. Flags are left undefined unless given, so env and file can apply. */
const SERVE_FLAGS: Array<[string, string, string]> = [
  ['--port <n>', 'port', 'data port (0 = pick a free port)'],
  ['--host <addr>', 'host', 'address to listen on'],
  ['--nodes <n>', 'nodes', 'gateway processes sharing the port'],
  ['--workers <n>', 'workers', 'inference worker threads per node'],
  ['--device <spec>', 'device', 'cpu | auto | cuda[:N] | webgpu[:N], or one per node: cuda:0,cuda:1'],
  ['--models-dir <dir>', 'modelsDir', 'model repository'],
  ['--model <name>', 'defaultModel', 'model for requests that name none'],
  ['--batch-size <n>', 'batchSize', 'max items per model run (1 = no batching)'],
  ['--batch-timeout-ms <ms>', 'batchTimeoutMs', 'max wait for a batch to fill'],
  ['--batch-policy <name>', 'batchPolicy', 'fixed | greedy | adaptive'],
  ['--slo-p99-ms <ms>', 'sloP99Ms', "p99 latency objective for every model (overrides each model's)"],
  ['--max-inflight-per-client <n>', 'maxInflightPerClient', 'per-client in-flight cap'],
  [
    '--max-queue-size <n>',
    'maxInflightPerClient',
    'the same cap, by its older name (STREAMINFER_MAX_QUEUE_SIZE)',
  ],
  ['--rate-limit-rps <n>', 'rateLimitRps', 'per-client request rate'],
  ['--rate-limit-key <key>', 'rateLimitKey', 'connection | ip: what a rate limit belongs to'],
  ['--trusted-proxies <cidrs>', 'trustedProxies', 'proxies whose X-Forwarded-For is believed (CIDR list)'],
  ['--max-connections <n>', 'maxConnections', 'per node: open WebSocket connections (0 = no cap)'],
  ['--max-connections-per-ip <n>', 'maxConnectionsPerIp', 'per node and address (0 = no cap)'],
  [
    '--max-protocol-errors-per-second <n>',
    'maxProtocolErrorsPerSecond',
    'close a WebSocket (1008) past this many protocol errors a second (0 = never)',
  ],
  [
    '--max-rate-limited-per-second <n>',
    'maxRateLimitedPerSecond',
    'close a WebSocket (1008) refused rate_limited more often than this a second (0 = never)',
  ],
  ['--error-coalesce-ms <ms>', 'errorCoalesceMs', 'answer identical id-less errors once per window'],
  [
    '--model-error-penalty <n>',
    'modelErrorPenalty',
    'extra rate-limit tokens a model_error costs its client',
  ],
  ['--max-payload-bytes <n>', 'maxPayloadBytes', 'largest WebSocket frame or HTTP body'],
  ['--request-timeout-ms <ms>', 'requestTimeoutMs', 'default request deadline'],
  ['--tls-cert <file>', 'tlsCert', 'PEM certificate (chain): the data port speaks https and wss'],
  ['--tls-key <file>', 'tlsKey', 'PEM private key of --tls-cert'],
  ['--tls-client-ca <file>', 'tlsClientCa', 'PEM CA: verify client certificates against it (mutual TLS)'],
  ['--api-keys <file>', 'apiKeysFile', 'tenants and the SHA-256 of their API keys (JSON); keys required'],
  [
    '--admin-token <token>',
    'adminToken',
    'admin token (visible to every local user in ps: prefer --admin-token-file)',
  ],
  ['--admin-token-file <file>', 'adminTokenFile', 'file holding the admin token (re-read on SIGHUP)'],
  ['--admin-allowed-origins <origins>', 'adminAllowedOrigins', 'web origins whose pages may call /api/*'],
  ['--admin-host <addr>', 'adminHost', 'admin listener address (not loopback: a token is required)'],
  ['--admin-port <n>', 'adminPort', 'admin listener port (/api/*, /metrics, /health; 0 = any free port)'],
  ['--admin-socket <path>', 'adminSocket', 'admin listener on this unix socket (mode 0600) instead'],
  ['--admin-tls-cert <file>', 'adminTlsCert', 'TLS certificate (PEM) of the admin listener'],
  ['--admin-tls-key <file>', 'adminTlsKey', 'TLS key (PEM) of the admin listener'],
  ['--metrics-on-data-port', 'metricsOnDataPort', 'also serve /metrics on the data port (compatibility)'],
  ['--strict-models', 'strictModels', 'refuse to start when any model or version fails to load'],
  ['--intra-op-threads <n>', 'intraOpThreads', 'ONNX Runtime threads per session'],
  ['--ring-bytes <n>', 'ringBytes', 'bytes per request/response ring (power of two)'],
  ['--shutdown-timeout-ms <ms>', 'shutdownTimeoutMs', 'how long SIGTERM waits for admitted requests'],
  ['--log-level <level>', 'logLevel', 'pino log level'],
  ['--cluster <urls>', 'cluster', 'NATS URL(s): join a fleet of hosts sharing registry and epochs'],
  [
    '--nats-user <user>',
    'natsUser',
    'NATS user (password: --nats-password-file or STREAMINFER_NATS_PASSWORD)',
  ],
  ['--nats-password-file <file>', 'natsPasswordFile', 'file holding the NATS password'],
  ['--nats-token-file <file>', 'natsTokenFile', 'file holding a NATS token (or STREAMINFER_NATS_TOKEN)'],
  ['--nats-nkey-file <file>', 'natsNkeyFile', 'file holding an nkey user seed (SU…)'],
  ['--nats-creds <file>', 'natsCreds', 'NATS .creds file (user JWT and seed)'],
  ['--nats-tls-ca <file>', 'natsTlsCa', "PEM CA that verifies the NATS server's certificate"],
  ['--nats-tls-cert <file>', 'natsTlsCert', 'PEM client certificate for NATS (with --nats-tls-key)'],
  ['--nats-tls-key <file>', 'natsTlsKey', 'PEM key of the NATS client certificate'],
  ['--nats-tls-first', 'natsTlsFirst', 'TLS before the NATS greeting (server handshake_first)'],
  [
    '--cluster-replicas <n>',
    'clusterReplicas',
    'replicas of the fleet buckets and object store (3 on a NATS cluster)',
  ],
  ['--fleet <name>', 'fleet', 'the fleet to join (with --cluster)'],
  ['--host-id <id>', 'hostId', "this host's name in its fleet (default <hostname>-<port>)"],
  ['--advertise-url <url>', 'advertiseUrl', 'how other hosts and operators reach this host'],
  [
    '--trusted-keys <file>',
    'trustedKeysFile',
    'PEM Ed25519 public keys pulled model versions must be signed by',
  ],
];

const serve = program.command('serve').description('start the server: a supervisor and its node processes');
for (const [flag, , help] of SERVE_FLAGS) serve.addOption(new Option(flag, help));
/** Errors name the flag the user typed (`--model`, `--trusted-keys`), not one derived from the setting's key. */
const SERVE_FLAG_NAMES: Record<string, string> = Object.fromEntries(
  SERVE_FLAGS.map(([flag, key]) => [key, flag.split(' ')[0]!]),
);
serve
  .option('--config <file>', 'JSON config file (flags > STREAMINFER_* env > file > defaults)')
  .option('--pid-file <file>', 'write the supervisor pid here (for `kill -HUP`)')
  .addHelpText(
    'after',
    () =>
      `\nSettings and their environment variables:\n${describeSettings()
        .map((s) => `  ${s.env.padEnd(34)} default ${s.defaultText}  ${s.help}`)
        .join('\n')}`,
  )
  .action(async (opts: Record<string, unknown>) => {
    const flags: Record<string, unknown> = {};
    for (const [flag, key] of SERVE_FLAGS) {
      const attribute = flag
        .slice(2)
        .split(' ')[0]!
        .replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
      if (opts[attribute] !== undefined) flags[key] = opts[attribute];
    }
    let file: unknown;
    const filePath = opts.config as string | undefined;
    try {
      if (filePath) file = JSON.parse(readFileSync(filePath, 'utf8'));
    } catch (error) {
      fail(`cannot read config file ${filePath}: ${(error as Error).message}`);
    }
    let resolved: ReturnType<typeof resolveConfigDetailed>;
    let tls: LoadedTls | undefined;
    let tenants: ReturnType<typeof readTenantFile> | undefined;
    try {
      resolved = resolveConfigDetailed({
        flags,
        flagNames: SERVE_FLAG_NAMES,
        env: process.env,
        ...(filePath ? { file, filePath } : {}),
      });
      // The certificate files are read and checked before anything forks (a broken one: exit 2, named).
      tls = loadTls(resolved.config, Date.now(), resolved.origins);
      // Validated whole before anything starts: a bad entry stops the start (exit 2) naming file and entry.
      if (resolved.config.apiKeysFile !== undefined) tenants = readTenantFile(resolved.config.apiKeysFile);
      assertNativeUws();
    } catch (error) {
      fail(error instanceof ConfigError ? error.message : (error as Error).message);
    }
    const config = resolved.config;
    // The fleet's NATS files (password, token, seed, creds, certificates) are read and checked now.
    let nats: NatsAuth | undefined;
    try {
      if (config.cluster !== undefined) nats = loadClusterNats(config);
    } catch (error) {
      fail(error instanceof NatsAuthError ? error.message : (error as Error).message);
    }
    const logger = pino({ level: config.logLevel, base: { component: 'supervisor', pid: process.pid } });
    for (const warning of [...resolved.warnings, ...(tls?.warnings ?? [])]) logger.warn(warning);
    if (flags.adminToken !== undefined)
      logger.warn(
        '--admin-token puts the token in the command line, which every local user can read (ps): use --admin-token-file or STREAMINFER_ADMIN_TOKEN',
      );
    let admin: AdminSecrets;
    try {
      admin = serverAdminSecrets(config, (message) => logger.warn(message));
    } catch (error) {
      fail(error instanceof AdminSetupError ? error.message : (error as Error).message);
    }
    // Read (and removed from the environment the nodes inherit) before anything forks.
    const notifier = SystemdNotifier.fromEnv(process.env, logger);
    const explicit = (key: string, env: string): boolean =>
      flags[key] !== undefined ||
      Boolean(process.env[env]?.trim()) ||
      (typeof file === 'object' && file !== null && key in file);
    const supervisor = new Supervisor(
      {
        config,
        explicitBatchSize: explicit('batchSize', 'STREAMINFER_BATCH_SIZE'),
        explicitBatchTimeout: explicit('batchTimeoutMs', 'STREAMINFER_BATCH_TIMEOUT_MS'),
        explicitBatchPolicy: explicit('batchPolicy', 'STREAMINFER_BATCH_POLICY'),
        testHooks: testHooksEnabled(),
        cores: os.availableParallelism(),
        ...(notifier ? { notifier } : {}),
        ...(tls ? { tls: tls.tls } : {}),
        ...(tenants ? { tenants } : {}),
        ...(nats ? { nats } : {}),
        admin,
        // Flags and environment given at start keep winning over the file on every configuration reload.
        sources: filePath ? { flags, env: { ...process.env }, filePath } : { flags, env: { ...process.env } },
      },
      logger,
    );
    const pidFile = opts.pidFile as string | undefined;
    let exiting = false;
    const stop = (signal: string): void => {
      if (exiting) return;
      exiting = true;
      logger.info({ signal }, 'stopping');
      supervisor.shutdown().then(() => {
        if (pidFile) rmSync(pidFile, { force: true });
        logger.info('streaminfer stopped');
        process.exit(0);
      });
    };
    process.on('SIGTERM', () => stop('SIGTERM'));
    process.on('SIGINT', () => stop('SIGINT'));
    process.on('SIGHUP', () => {
      // Re-read the config file, apply every live setting and re-read the model repository: an atomic reload.
      let fresh: unknown;
      try {
        fresh = filePath ? JSON.parse(readFileSync(filePath, 'utf8')) : undefined;
      } catch (error) {
        logger.error(
          { err: (error as Error).message, file: filePath },
          'SIGHUP: cannot read the config file; still serving the previous configuration',
        );
        return;
      }
      // The supervisor logs the outcome (and a rejected configuration) itself.
      void supervisor.reloadConfigResponse(fresh, filePath, 'SIGHUP').then((response) => {
        if (response.status === 409)
          logger.warn('SIGHUP refused: a reload is in progress; send SIGHUP again once it has finished');
      });
    });
    try {
      const port = await supervisor.start();
      if (pidFile) writeFileSync(pidFile, `${process.pid}\n`);
      const adminAddress = supervisor.adminAddress!;
      logger.info(
        {
          port,
          host: config.host,
          admin: adminAddress.url,
          ...(adminAddress.port !== undefined ? { admin_port: adminAddress.port } : {}),
          nodes: config.nodes,
          workers: config.workers,
          device: config.device,
          node_pids: supervisor.nodePids(),
        },
        'streaminfer ready',
      );
    } catch (error) {
      logger.error({ err: (error as Error).message }, 'start failed');
      await supervisor.shutdown();
      // NATS refused the credentials or the TLS handshake: a setting to fix (2), not a failure to retry (1).
      process.exit(error instanceof ClusterError && error.code === 'nats_refused' ? 2 : 1);
    }
  });

/**
 * The options every control command has: where the admin listener is and its token (client.ts adminTarget).
 * `reload` has a --config of its own (the file it applies, which also locates the listener).
 */
function addClientOptions(command: Command, withConfig = true): Command {
  command
    .option(
      '--url <url>',
      'admin listener: http(s)://host:port or unix:/path (default: found from the settings, else http://127.0.0.1:8001)',
    )
    .option('--admin-socket <path>', "the server's admin unix socket (STREAMINFER_ADMIN_SOCKET)")
    .option('--token-file <file>', 'file holding the admin token')
    .option('--token <token>', 'admin token (visible in ps: prefer --token-file or STREAMINFER_ADMIN_TOKEN)');
  if (withConfig)
    command.option('--config <file>', 'server config file: its admin settings locate the listener and token');
  return command.option('--json', 'machine-readable output');
}

interface ClientFlags extends AdminFlags {
  json?: boolean;
}

function clientOptions(flags: AdminFlags) {
  try {
    return adminTarget(flags);
  } catch (error) {
    fail(error instanceof ConfigError ? error.message : (error as Error).message);
  }
}

/**
 * Prints an admin answer and sets the exit code (1 unless the server answered 200). `--json`: the answer as
 * sent, pretty-printed, or with `statusInJson` on one line with the HTTP status folded in; else `human`.
 */
function report<T>(
  flags: ClientFlags,
  status: number,
  answer: T,
  human: (answer: T, status: number) => void,
  statusInJson = false,
): void {
  if (flags.json)
    console.log(
      statusInJson ? JSON.stringify({ status, ...(answer as object) }) : JSON.stringify(answer, null, 2),
    );
  else human(answer, status);
  if (status !== 200) process.exitCode = 1;
}

/** One admin call, its answer printed by `report`. */
async function runAdmin<T>(
  flags: ClientFlags,
  method: 'GET' | 'POST',
  path: string,
  body: Record<string, unknown> | undefined,
  human: (answer: T, status: number) => void,
  statusInJson = false,
): Promise<void> {
  const { status, body: answer } = await callServer(clientOptions(flags), method, path, body);
  report(flags, status, answer as T, human, statusInJson);
}

/** A refusal as the server typed it. */
function printRefusal(what: string, status: number, answer: { code?: string; message?: string }): void {
  console.error(`${what} failed (${status} ${answer.code}): ${answer.message}`);
}

registerStatus(program, { addClientOptions, clientOptions, fail });

interface ReloadAnswer {
  id?: number;
  result?: string;
  strategy?: string;
  epoch?: number;
  epoch_before?: number;
  changes?: Array<{ model: string; from: string | null; to: string | null }>;
  default_model?: string;
  previous?: string;
  duration_ms?: number;
  code?: string;
  message?: string;
  error?: string;
  settings_applied?: string[];
  restart_required?: string[];
  nodes?: Array<{ node: number; state: string; error?: string }>;
  /** `--wait`: when every node answered ready again, counted from the command's start. */
  ready_after_ms?: number;
}

function describeReload(answer: ReloadAnswer): string {
  const lines = [
    `reload ${answer.id}: ${answer.result} (${answer.strategy}), epoch ${answer.epoch_before} -> ${answer.epoch}, ${answer.duration_ms} ms`,
  ];
  for (const change of answer.changes ?? [])
    lines.push(`  ${change.model}: ${change.from ?? '(new)'} -> ${change.to ?? '(removed)'}`);
  if (answer.previous !== answer.default_model)
    lines.push(`  default model: ${answer.previous} -> ${answer.default_model}`);
  if (answer.settings_applied?.length)
    lines.push(`  settings applied: ${answer.settings_applied.join(', ')}`);
  if (answer.restart_required?.length)
    lines.push(`  need a restart to take effect: ${answer.restart_required.join(', ')}`);
  for (const node of answer.nodes ?? [])
    if (node.state !== 'committed' && node.state !== 'rolled')
      lines.push(
        `  node ${node.node}: ${node.state.replace('_', ' ')}${node.error ? ` (${node.error})` : ''}`,
      );
  if (answer.error) lines.push(`  error: ${answer.error}`);
  return lines.join('\n');
}

addClientOptions(
  program
    .command('reload')
    .description(
      'reload models on every node: a version, the default model, or re-read the repository (like SIGHUP)',
    ),
  false,
)
  .option('--model <name>', 'model to act on (alone: make it the default model)')
  .option('--version <v>', 'with --model: make this version stable (loads it if needed)')
  .addOption(
    new Option('--strategy <name>', 'atomic (epoch barrier) or rolling (node by node, in place)').choices([
      'atomic',
      'rolling',
    ]),
  )
  .option(
    '--pid-file <file>',
    'signal the supervisor (SIGHUP: re-read config and repository) instead of calling the API',
  )
  .option(
    '--config <file>',
    "apply this JSON config file's live settings on every node (as SIGHUP does with the serve --config file); " +
      'the file is read here and sent to the server; its admin settings also locate the admin listener',
  )
  .option(
    '--wait',
    'after the outcome, wait until every node is ready again (what READY=1 tells systemd); for ExecReload=',
  )
  .action(
    async (
      flags: ClientFlags & {
        model?: string;
        version?: string;
        strategy?: string;
        pidFile?: string;
        config?: string;
        wait?: boolean;
      },
    ) => {
      const options = clientOptions(flags);
      const started = Date.now();
      let answer: ReloadAnswer;
      let status = 200;
      let body: Record<string, unknown> | undefined;
      if (flags.config) {
        if (flags.model || flags.version || flags.pidFile)
          fail('--config re-reads everything; it takes no --model, --version or --pid-file');
        let config: unknown;
        try {
          config = JSON.parse(readFileSync(flags.config, 'utf8'));
        } catch (error) {
          fail(`cannot read config file ${flags.config}: ${(error as Error).message}`);
        }
        body = { config };
      } else if (flags.pidFile) {
        if (flags.model || flags.version || flags.strategy)
          fail('--pid-file sends SIGHUP (re-read everything); it takes no --model, --version or --strategy');
      } else {
        if (flags.version && !flags.model) fail('--version needs --model');
        body = {};
        if (flags.model) body.model = flags.model;
        if (flags.version) body.version = flags.version;
      }
      if (body && flags.strategy) body.strategy = flags.strategy;
      const before = ((await callServer(options, 'GET', '/api/reload')).body as ReloadAnswer).id ?? 0;
      if (flags.pidFile) {
        const pid = Number(readFileSync(flags.pidFile, 'utf8').trim());
        if (!Number.isInteger(pid) || pid <= 0) fail(`${flags.pidFile} holds no pid`);
        process.kill(pid, 'SIGHUP');
        answer = await outcomeAfter(options, before, 'SIGHUP sent, but');
        if (answer.result === 'failed') status = 500;
      } else {
        let response: { status: number; body: unknown } | undefined;
        try {
          response = await callServer({ ...options, timeoutMs: 180000 }, 'POST', '/api/reload', body);
        } catch (error) {
          if (!(error instanceof ClientError)) throw error;
        }
        const refused = response?.status === 503 && (response.body as ReloadAnswer).code === 'unavailable';
        if (response && !refused) {
          status = response.status;
          answer = response.body as ReloadAnswer;
        } else {
          // The node carrying this request went away (the reload restarted it): read the outcome instead.
          answer = await outcomeAfter(options, before, 'the connection was lost, and');
          if (answer.result === 'failed') status = 500;
        }
      }
      let notReady: string | undefined;
      if (flags.wait && status === 200) {
        notReady = await readyAgain(options, started + 180000);
        if (notReady) status = 503;
        else answer.ready_after_ms = Date.now() - started;
      }
      report(
        flags,
        status,
        answer,
        () => {
          if (answer.id !== undefined && answer.result)
            (status === 200 ? console.log : console.error)(describeReload(answer));
          else printRefusal('reload', status, answer);
          if (answer.ready_after_ms !== undefined)
            console.log(`  ready again after ${answer.ready_after_ms} ms`);
          if (notReady) console.error(`  ${notReady}`);
        },
        true,
      );
      if (notReady && flags.json) console.error(`streaminfer: ${notReady}`);
    },
  );

/** Waits for a reload outcome newer than `before` (GET /api/reload). */
async function outcomeAfter(
  options: ReturnType<typeof clientOptions>,
  before: number,
  what: string,
): Promise<ReloadAnswer> {
  const until = Date.now() + 180000;
  for (;;) {
    // A connection may land on a node that is going away: that is one more try, not a failure.
    const reply = await callServer(options, 'GET', '/api/reload').catch((error: unknown) => {
      if (error instanceof ClientError) return undefined;
      throw error;
    });
    const answer = reply?.status === 200 ? (reply.body as ReloadAnswer) : undefined;
    if (answer && (answer.id ?? 0) > before) return answer;
    if (Date.now() > until) fail(`${what} no reload outcome appeared within 180 s`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/**
 * `reload --wait`: polls /health until the host is ready (every node ready and serving; the moment the
 * supervisor sends READY=1). Returns why not when `until` passes first.
 */
async function readyAgain(
  options: ReturnType<typeof clientOptions>,
  until: number,
): Promise<string | undefined> {
  let seen = 'no answer yet';
  for (;;) {
    const reply = await callServer({ ...options, timeoutMs: 10000 }, 'GET', '/health').catch(
      (error: unknown) => {
        if (error instanceof ClientError) return { status: 0, body: error.message };
        throw error;
      },
    );
    if (reply.status === 200) return undefined;
    const health = reply.body as Partial<HealthAnswer> | string;
    seen =
      typeof health === 'string'
        ? health
        : `status ${health.status}; ${(health.nodes ?? []).map((node) => `node ${node.node} ${node.state}`).join(', ')}`;
    if (Date.now() > until) return `the host was not ready again within 180 s (last seen: ${seen})`;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

const models = program
  .command('models')
  .description('inspect and roll out model versions on a running server');

interface ModelListing {
  default_model: string;
  models: Array<{
    name: string;
    default_version: string;
    aliases?: Record<string, string>;
    canary_percent?: number;
    shadow?: boolean;
    versions: Array<{ version: string; execution_provider: string }>;
  }>;
}

addClientOptions(
  models.command('list').description('models, loaded versions, aliases, canary and shadow'),
).action((flags: ClientFlags) =>
  runAdmin<ModelListing>(flags, 'GET', '/api/models', undefined, (list, status) => {
    if (status !== 200) {
      console.log(JSON.stringify(list, null, 2));
      return;
    }
    for (const model of list.models) {
      const mark = model.name === list.default_model ? ' (default model)' : '';
      const aliases = Object.entries(model.aliases ?? { stable: model.default_version })
        .map(([alias, version]) => `${alias}=${version}`)
        .join(' ');
      const extras = [
        model.canary_percent ? `canary ${model.canary_percent}%` : '',
        model.shadow ? 'shadow on' : '',
      ]
        .filter(Boolean)
        .join(', ');
      console.log(
        `${model.name}${mark}: ${aliases}; loaded ${model.versions.map((v) => v.version).join(', ')} on ${model.versions[0]?.execution_provider}${extras ? `; ${extras}` : ''}`,
      );
    }
  }),
);

/** Runs one registry action and prints its outcome. */
function registryCommand(
  flags: ClientFlags,
  name: string,
  action: string,
  body: Record<string, unknown>,
): Promise<void> {
  return runAdmin<ReloadAnswer & { model?: Record<string, unknown> }>(
    flags,
    'POST',
    `/api/models/${encodeURIComponent(name)}/${action}`,
    body,
    (result, status) => {
      if (status !== 200) {
        printRefusal(action, status, result);
        return;
      }
      const model = result.model ?? {};
      console.log(
        `${name}: stable=${model.stable} candidate=${model.candidate ?? '-'} previous=${model.previous_stable ?? '-'} canary=${model.canary_percent}% shadow=${model.shadow ? 'on' : 'off'} (epoch ${result.epoch}, ${result.duration_ms} ms)`,
      );
    },
    true,
  );
}

addClientOptions(
  models.command('deploy <name> <version>').description('load a version beside stable as the candidate'),
).action((name: string, version: string, flags: ClientFlags) =>
  registryCommand(flags, name, 'candidate', { version }),
);
addClientOptions(
  models.command('canary <name> <percent>').description('send this % of unpinned requests to the candidate'),
).action((name: string, percent: string, flags: ClientFlags) => {
  const value = Number(percent);
  if (!Number.isFinite(value)) fail('percent must be a number from 0 to 100');
  return registryCommand(flags, name, 'canary', { percent: value });
});
addClientOptions(
  models.command('shadow <name> <on|off>').description('mirror stable traffic to the candidate and compare'),
).action((name: string, state: string, flags: ClientFlags) => {
  if (state !== 'on' && state !== 'off') fail('shadow takes on or off');
  return registryCommand(flags, name, 'shadow', { enabled: state === 'on' });
});
addClientOptions(
  models
    .command('promote <name>')
    .description('the candidate becomes stable (the old stable stays loaded for rollback)'),
).action((name: string, flags: ClientFlags) => registryCommand(flags, name, 'promote', {}));
addClientOptions(
  models.command('rollback <name>').description('stable goes back to the previous stable, instantly'),
).action((name: string, flags: ClientFlags) => registryCommand(flags, name, 'rollback', {}));

registerModelsPush(models, fail);
registerModelsKeygen(models, fail);
registerRollout(models, { addClientOptions, clientOptions, fail });

const fleet = program.command('fleet').description("a fleet's membership (hosts started with --cluster)");
addClientOptions(
  fleet
    .command('exclude <host>')
    .description(
      'take a silent member out of the fleet: changes go on without it; back, it catches up and re-joins',
    ),
).action((host: string, flags: ClientFlags) =>
  runAdmin<{ fleet?: string; excluded?: string; revision?: number; members?: string[]; warning?: string }>(
    flags,
    'POST',
    `/api/fleet/hosts/${encodeURIComponent(host)}/exclude`,
    {},
    (answer, status) => {
      if (status !== 200) {
        printRefusal('exclude', status, answer as { code?: string; message?: string });
        return;
      }
      console.log(
        `fleet ${answer.fleet}: host ${answer.excluded} excluded (revision ${answer.revision}); members: ${answer.members?.join(', ')}`,
      );
      if (answer.warning) console.error(`warning: ${answer.warning}`);
    },
  ),
);

const bench = program.command('bench').description('measure without a server');
bench
  .command('model <name>')
  .description(
    "the model's own speed in-process at batch sizes 1, 2, 4, …, with the server workers' thread settings",
  )
  .option('--models-dir <dir>', 'model repository', process.env.STREAMINFER_MODELS_DIR?.trim() || './models')
  .option('--version <v>', 'model version (default: the default version)')
  .option('--max-batch <n>', 'largest batch size', '256')
  .option('--min-ms <ms>', 'time spent per batch size', '1000')
  .option(
    '--device <spec>',
    'cpu | auto | cuda[:N] | webgpu[:N]',
    process.env.STREAMINFER_DEVICE?.trim() || 'cpu',
  )
  .option(
    '--workers <n>',
    'workers per node the threads are sized for',
    process.env.STREAMINFER_WORKERS?.trim() || '1',
  )
  .option(
    '--intra-op-threads <n>',
    'ONNX Runtime intra-op threads (default: as the server: (cores - 1) / workers)',
  )
  .option('--json', 'machine-readable output')
  .action(async (name: string, flags: Record<string, string | boolean | undefined>) => {
    const positive = (key: string): number => {
      const value = Number(flags[key]);
      if (!Number.isInteger(value) || value < 1)
        fail(`--${key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)} must be a positive integer`);
      return value;
    };
    const options: BenchModelOptions = {
      modelsDir: String(flags.modelsDir),
      model: name,
      maxBatch: positive('maxBatch'),
      minMs: positive('minMs'),
      device: String(flags.device),
      workers: positive('workers'),
    };
    if (typeof flags.version === 'string') options.version = flags.version;
    if (flags.intraOpThreads !== undefined) options.intraOpThreads = positive('intraOpThreads');
    const result = await benchModel(options);
    console.log(flags.json ? JSON.stringify(result, null, 2) : formatBenchModel(result));
  });

registerSimulate(program, fail);
registerStream(program, fail);

function fail(message: string): never {
  console.error(`streaminfer: ${message}`);
  process.exit(2);
}

program.parseAsync(process.argv).catch((error: Error) => fail(error.message));
