/**
 * The NATS flags every connecting command takes (`stream`, `models push`, `simulate`; `serve` has them as
 * settings): the same names, their STREAMINFER_NATS_* twins, libs/nats-auth behind them. A password or token
 * is never a flag (argv is public to every local user): a file, or the environment.
 */
import type { Command } from 'commander';
import {
  flagNames,
  loadNatsAuth,
  mergeNatsSettings,
  type NatsAuth,
  type NatsAuthSettings,
  natsSettingsFromEnv,
  natsSettingsFromKeys,
} from '../../libs/nats-auth';

export interface NatsFlags {
  natsUser?: string;
  natsPasswordFile?: string;
  natsTokenFile?: string;
  natsNkeyFile?: string;
  natsCreds?: string;
  natsTlsCa?: string;
  natsTlsCert?: string;
  natsTlsKey?: string;
  natsTlsFirst?: boolean;
}

export function addNatsOptions(command: Command): Command {
  return command
    .option('--nats-user <user>', 'NATS user (password: --nats-password-file or STREAMINFER_NATS_PASSWORD)')
    .option('--nats-password-file <file>', 'file holding the NATS password')
    .option('--nats-token-file <file>', 'file holding a NATS token (or STREAMINFER_NATS_TOKEN)')
    .option('--nats-nkey-file <file>', 'file holding an nkey user seed (SU…)')
    .option('--nats-creds <file>', 'NATS .creds file (user JWT and seed)')
    .option('--nats-tls-ca <file>', "PEM CA that verifies the NATS server's certificate")
    .option('--nats-tls-cert <file>', 'PEM client certificate for NATS (with --nats-tls-key)')
    .option('--nats-tls-key <file>', 'PEM key of the NATS client certificate')
    .option('--nats-tls-first', 'TLS before the NATS greeting (a server with handshake_first)');
}

/** The flags given, as settings (undefined where not given, so the environment can apply). */
export function natsFlagSettings(flags: NatsFlags): Omit<NatsAuthSettings, 'servers'> {
  return natsSettingsFromKeys(flags);
}

/** Flags > STREAMINFER_NATS_* > nothing, loaded and checked (throws NatsAuthError naming the flag). */
export function loadCommandNats(
  servers: string,
  serversName: string,
  flags: NatsFlags,
  env: Readonly<Record<string, string | undefined>> = process.env,
): NatsAuth {
  return loadNatsAuth(
    mergeNatsSettings(servers, natsFlagSettings(flags), natsSettingsFromEnv(env)),
    flagNames(serversName),
  );
}
