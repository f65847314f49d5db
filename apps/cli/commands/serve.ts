/** `streaminfer serve`: resolves the settings (flags > env > file > defaults), checks every file, starts the supervisor. */
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import { type Command, Option } from 'commander';
import pino from 'pino';
import { type AdminSecrets, AdminSetupError } from '../../../libs/admin';
import { ConfigError, describeSettings, resolveConfigDetailed } from '../../../libs/config';
import { type NatsAuth, NatsAuthError } from '../../../libs/nats-auth';
import { testHooksEnabled } from '../../../libs/test-hooks';
import { assertNativeUws } from '../../../libs/uws';
import { type LoadedTls, loadTls } from '../../node/tls-files';
import { serverAdminSecrets } from '../../supervisor/admin/admin-api';
import { FleetError } from '../../supervisor/fleet';
import { loadClusterNats } from '../../supervisor/fleet/fleet-join';
import { SystemdNotifier } from '../../supervisor/notify';
import { Supervisor } from '../../supervisor/supervisor';
import { readTenantFile } from '../../supervisor/tenant-shares';

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

/** Errors name the flag the user typed (`--model`, `--trusted-keys`), not one derived from the setting's key. */
const SERVE_FLAG_NAMES: Record<string, string> = Object.fromEntries(
  SERVE_FLAGS.map(([flag, key]) => [key, flag.split(' ')[0]!]),
);

export function registerServe(program: Command, fail: (message: string) => never): void {
  const serve = program.command('serve').description('start the server: a supervisor and its node processes');
  for (const [flag, , help] of SERVE_FLAGS) serve.addOption(new Option(flag, help));
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
          sources: filePath
            ? { flags, env: { ...process.env }, filePath }
            : { flags, env: { ...process.env } },
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
        process.exit(error instanceof FleetError && error.code === 'nats_refused' ? 2 : 1);
      }
    });
}
