/**
 * The one option set of every NATS connection StreamInfer makes (fleet, stream pipeline, `models push`,
 * `simulate`): servers, one identity (user + password, token, nkey seed or `.creds`), TLS. The same flags,
 * environment variables and config keys wherever a command connects. Pure: files are read by load.ts.
 */
import { NatsAuthError } from './errors';

export interface NatsTlsSettings {
  /** PEM file of the CA(s) that signed the server's certificate (default: the system's). */
  ca?: string;
  /** PEM client certificate (needs `key`), for servers with `verify: true`. */
  cert?: string;
  key?: string;
  /** TLS before the NATS greeting (`handshake_first` on the server; nats-server ≥ 2.10.4). */
  handshakeFirst?: boolean;
}

export interface NatsAuthSettings {
  /** nats:// or tls:// URLs, as an array or a comma list; userinfo (`user:pass@`, `token@`) is accepted. */
  servers: string | readonly string[];
  user?: string;
  /** Only from the environment or a file (never argv, which every local user can read). */
  password?: string;
  passwordFile?: string;
  token?: string;
  tokenFile?: string;
  /** A file holding an nkey user seed (`SU…`). */
  nkeyFile?: string;
  /** A `.creds` file: the user JWT and its nkey seed (operator mode). */
  creds?: string;
  tls?: NatsTlsSettings;
}

export type NatsSettingName =
  | 'servers'
  | 'user'
  | 'password'
  | 'passwordFile'
  | 'token'
  | 'tokenFile'
  | 'nkeyFile'
  | 'creds'
  | 'tlsCa'
  | 'tlsCert'
  | 'tlsKey'
  | 'tlsFirst';

/** How each setting is named where it came from, for messages. */
export type NatsSettingNames = Readonly<Record<NatsSettingName, string>>;

/** The command-line names (with their environment twins), shared by every command that connects. */
export const NATS_FLAGS: Readonly<
  Record<Exclude<NatsSettingName, 'servers' | 'password' | 'token'>, string>
> = {
  user: '--nats-user',
  passwordFile: '--nats-password-file',
  tokenFile: '--nats-token-file',
  nkeyFile: '--nats-nkey-file',
  creds: '--nats-creds',
  tlsCa: '--nats-tls-ca',
  tlsCert: '--nats-tls-cert',
  tlsKey: '--nats-tls-key',
  tlsFirst: '--nats-tls-first',
};

/** The environment variables, the same for every command. */
export const NATS_ENV: Readonly<Record<Exclude<NatsSettingName, 'servers'>, string>> = {
  user: 'STREAMINFER_NATS_USER',
  password: 'STREAMINFER_NATS_PASSWORD',
  passwordFile: 'STREAMINFER_NATS_PASSWORD_FILE',
  token: 'STREAMINFER_NATS_TOKEN',
  tokenFile: 'STREAMINFER_NATS_TOKEN_FILE',
  nkeyFile: 'STREAMINFER_NATS_NKEY_FILE',
  creds: 'STREAMINFER_NATS_CREDS',
  tlsCa: 'STREAMINFER_NATS_TLS_CA',
  tlsCert: 'STREAMINFER_NATS_TLS_CERT',
  tlsKey: 'STREAMINFER_NATS_TLS_KEY',
  tlsFirst: 'STREAMINFER_NATS_TLS_FIRST',
};

/**
 * Names for messages about settings given as flags or their environment variables (and, with `fileKey`, the
 * config file key each one also has): `--nats-user (STREAMINFER_NATS_USER, natsUser)`.
 */
export function flagNames(
  servers: string,
  fileKey: (name: NatsSettingName) => string | undefined = () => undefined,
): NatsSettingNames {
  const label = (name: Exclude<NatsSettingName, 'servers'>) => {
    const key = fileKey(name);
    if (name === 'password' || name === 'token') return key ? `${NATS_ENV[name]} (${key})` : NATS_ENV[name];
    return `${NATS_FLAGS[name]} (${[NATS_ENV[name], ...(key ? [key] : [])].join(', ')})`;
  };
  return {
    servers,
    user: label('user'),
    password: label('password'),
    passwordFile: label('passwordFile'),
    token: label('token'),
    tokenFile: label('tokenFile'),
    nkeyFile: label('nkeyFile'),
    creds: label('creds'),
    tlsCa: label('tlsCa'),
    tlsCert: label('tlsCert'),
    tlsKey: label('tlsKey'),
    tlsFirst: label('tlsFirst'),
  };
}

const TRUE_WORDS = new Set(['true', '1', 'yes', 'on']);
const FALSE_WORDS = new Set(['false', '0', 'no', 'off']);

/** `true`/`1`/`yes`/`on` or the opposites; undefined for anything else. */
export function parseFlagWord(raw: string): boolean | undefined {
  const word = raw.trim().toLowerCase();
  if (TRUE_WORDS.has(word)) return true;
  if (FALSE_WORDS.has(word)) return false;
  return undefined;
}

/** The identity and TLS settings in an environment (STREAMINFER_NATS_*); servers come from each command's own. */
export function natsSettingsFromEnv(
  env: Readonly<Record<string, string | undefined>>,
): Omit<NatsAuthSettings, 'servers'> {
  const get = (key: keyof typeof NATS_ENV) => {
    const value = env[NATS_ENV[key]];
    return value === undefined || value.trim() === '' ? undefined : value;
  };
  const out: Omit<NatsAuthSettings, 'servers'> = {};
  const user = get('user');
  const password = get('password');
  const passwordFile = get('passwordFile');
  const token = get('token');
  const tokenFile = get('tokenFile');
  const nkeyFile = get('nkeyFile');
  const creds = get('creds');
  if (user !== undefined) out.user = user.trim();
  // A password or token is taken as it is: surrounding spaces may be part of it.
  if (password !== undefined) out.password = password;
  if (passwordFile !== undefined) out.passwordFile = passwordFile.trim();
  if (token !== undefined) out.token = token;
  if (tokenFile !== undefined) out.tokenFile = tokenFile.trim();
  if (nkeyFile !== undefined) out.nkeyFile = nkeyFile.trim();
  if (creds !== undefined) out.creds = creds.trim();
  const tls: NatsTlsSettings = {};
  const ca = get('tlsCa');
  const cert = get('tlsCert');
  const key = get('tlsKey');
  const first = get('tlsFirst');
  if (ca !== undefined) tls.ca = ca.trim();
  if (cert !== undefined) tls.cert = cert.trim();
  if (key !== undefined) tls.key = key.trim();
  if (first !== undefined) {
    const value = parseFlagWord(first);
    if (value === undefined)
      throw new NatsAuthError(NATS_ENV.tlsFirst, `expected true or false, got ${JSON.stringify(first)}`);
    tls.handshakeFirst = value;
  }
  if (Object.keys(tls).length > 0) out.tls = tls;
  return out;
}

/** Layers merged field by field, the first that sets a field winning (flags, then env, then a file). */
export function mergeNatsSettings(
  servers: string | readonly string[],
  ...layers: Array<Omit<NatsAuthSettings, 'servers'> | undefined>
): NatsAuthSettings {
  const out: NatsAuthSettings = { servers };
  const tls: NatsTlsSettings = {};
  for (const layer of layers.reverse()) {
    if (!layer) continue;
    for (const [key, value] of Object.entries(layer))
      if (key !== 'tls' && value !== undefined) (out as unknown as Record<string, unknown>)[key] = value;
    for (const [key, value] of Object.entries(layer.tls ?? {}))
      if (value !== undefined) (tls as Record<string, unknown>)[key] = value;
  }
  if (Object.keys(tls).length > 0) out.tls = tls;
  return out;
}

/**
 * The NATS settings under their flat names (`natsUser`, `natsPasswordFile`, …, as the server's config keys and the
 * commands' flags spell them), as the shared option set; absent keys stay absent so other layers can apply.
 */
export interface FlatNatsSettings {
  natsUser?: string | undefined;
  natsPassword?: string | undefined;
  natsPasswordFile?: string | undefined;
  natsToken?: string | undefined;
  natsTokenFile?: string | undefined;
  natsNkeyFile?: string | undefined;
  natsCreds?: string | undefined;
  natsTlsCa?: string | undefined;
  natsTlsCert?: string | undefined;
  natsTlsKey?: string | undefined;
  natsTlsFirst?: boolean | undefined;
}

export function natsSettingsFromKeys(flat: FlatNatsSettings): Omit<NatsAuthSettings, 'servers'> {
  const out: Omit<NatsAuthSettings, 'servers'> = {};
  if (flat.natsUser !== undefined) out.user = flat.natsUser;
  if (flat.natsPassword !== undefined) out.password = flat.natsPassword;
  if (flat.natsPasswordFile !== undefined) out.passwordFile = flat.natsPasswordFile;
  if (flat.natsToken !== undefined) out.token = flat.natsToken;
  if (flat.natsTokenFile !== undefined) out.tokenFile = flat.natsTokenFile;
  if (flat.natsNkeyFile !== undefined) out.nkeyFile = flat.natsNkeyFile;
  if (flat.natsCreds !== undefined) out.creds = flat.natsCreds;
  const tls: NatsTlsSettings = {};
  if (flat.natsTlsCa !== undefined) tls.ca = flat.natsTlsCa;
  if (flat.natsTlsCert !== undefined) tls.cert = flat.natsTlsCert;
  if (flat.natsTlsKey !== undefined) tls.key = flat.natsTlsKey;
  if (flat.natsTlsFirst) tls.handshakeFirst = true;
  if (Object.keys(tls).length > 0) out.tls = tls;
  return out;
}
