/**
 * Settings → what a connection needs, checked up front: every file read and parsed here, at start, and each
 * failure names the setting and the file. Two identities at once, a certificate without its key, a seed that
 * is not a user seed, a `.creds` without its JWT: refused before anything connects. The result holds only
 * plain strings, so it crosses to a worker thread (workerData) as it is, never through argv.
 */
import { createPrivateKey, X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { nkeys } from '@nats-io/nats-core';
import { NatsAuthError } from './errors';
import { redactServers } from './redact';
import { flagNames, type NatsAuthSettings, type NatsSettingNames } from './settings';

export type NatsAuthMode = 'none' | 'user' | 'token' | 'nkey' | 'creds';

/** A connection's resolved settings: servers without userinfo, one identity, TLS material (PEM text). */
export interface NatsAuth {
  servers: string[];
  /** The servers as given, userinfo redacted: what messages and answers show. */
  shown: string;
  mode: NatsAuthMode;
  user?: string;
  pass?: string;
  token?: string;
  /** The user seed (`SU…`) of an nkey identity. */
  seed?: string;
  /** A `.creds` file's text (JWT and seed). */
  creds?: string;
  tls?: { ca?: string; cert?: string; key?: string; handshakeFirst: boolean };
}

const URL_SCHEME = /^(nats|tls):\/\/[^\s,]+$/i;
const USER_SEED = /^SU[A-Z2-7]{56}$/;
// A .creds file: a JWT block, then a seed block (nsc's format; nats.js's credsAuthenticator reads the same).
const CREDS_BLOCK = /-{3,}[^\n]*-{3,}\r?\n([^\n]+)\r?\n\s*-{3,}[^\n]*-{3,}/g;
const JWT = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;

function readSetting(setting: string, file: string): string {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    const why =
      code === 'ENOENT'
        ? 'no such file'
        : code === 'EACCES'
          ? 'permission denied'
          : code === 'EISDIR'
            ? 'a directory, not a file'
            : (error as Error).message;
    throw new NatsAuthError(setting, `cannot read ${file}: ${why}`, { cause: error });
  }
  return text;
}

/** A one-line secret file (password, token): its first line, without the line end; empty is refused. */
function readSecret(setting: string, file: string): string {
  const value = readSetting(setting, file).replace(/\r?\n[\s\S]*$/, '');
  if (value === '') throw new NatsAuthError(setting, `${file} is empty`);
  return value;
}

function checkSeed(setting: string, where: string, seed: string): void {
  if (!USER_SEED.test(seed))
    throw new NatsAuthError(
      setting,
      `${where} holds no nkey user seed (a line of 58 characters starting SU)`,
    );
  try {
    nkeys.fromSeed(new TextEncoder().encode(seed));
  } catch (error) {
    throw new NatsAuthError(setting, `${where}: not a valid nkey seed (${(error as Error).message})`);
  }
}

function pem(setting: string, file: string, what: string): string {
  const text = readSetting(setting, file);
  if (!text.includes('-----BEGIN ')) throw new NatsAuthError(setting, `${file} is not a PEM ${what}`);
  return text;
}

function certificate(setting: string, file: string): { text: string; cert: X509Certificate } {
  const text = pem(setting, file, 'certificate');
  try {
    return { text, cert: new X509Certificate(text) };
  } catch (error) {
    throw new NatsAuthError(setting, `${file} is not a PEM certificate (${(error as Error).message})`);
  }
}

interface ParsedServers {
  servers: string[];
  user?: string;
  pass?: string;
  token?: string;
}

/** Splits off userinfo: `nats://u:p@h` is user + password, `nats://t@h` a token; all URLs must agree. */
function parseServers(setting: string, raw: string | readonly string[]): ParsedServers {
  const list = (typeof raw === 'string' ? raw.split(',') : [...raw]).map((s) => s.trim());
  if (list.length === 0 || list.some((s) => s === ''))
    throw new NatsAuthError(setting, 'expected nats:// or tls:// URLs separated by commas');
  const servers: string[] = [];
  let userinfo: string | undefined;
  for (const entry of list) {
    const shown = redactServers(entry);
    if (!URL_SCHEME.test(entry))
      throw new NatsAuthError(setting, `not a nats:// or tls:// URL: ${JSON.stringify(shown)}`);
    let url: URL;
    try {
      url = new URL(entry);
    } catch {
      throw new NatsAuthError(setting, `not a URL: ${JSON.stringify(shown)}`);
    }
    if (url.hostname === '') throw new NatsAuthError(setting, `no host in ${JSON.stringify(shown)}`);
    if ((url.pathname !== '' && url.pathname !== '/') || url.search || url.hash)
      throw new NatsAuthError(setting, `a NATS URL has no path or query: ${JSON.stringify(shown)}`);
    const info = url.username || url.password ? `${url.username}:${url.password}` : undefined;
    if (info !== undefined) {
      if (userinfo !== undefined && userinfo !== info)
        throw new NatsAuthError(setting, 'the URLs carry different credentials; give one identity');
      userinfo = info;
    }
    servers.push(`${url.protocol}//${url.host}`);
  }
  if (userinfo === undefined) return { servers };
  const [user, pass] = userinfo.split(':') as [string, string];
  const decode = (text: string) => {
    try {
      return decodeURIComponent(text);
    } catch {
      throw new NatsAuthError(setting, 'the credentials in a URL are not valid percent-encoding');
    }
  };
  return pass === '' ? { servers, token: decode(user) } : { servers, user: decode(user), pass: decode(pass) };
}

/**
 * Checks the settings and reads every file they name. `names` says how the settings were spelled where they
 * came from (default: the flags and their environment variables). Throws NatsAuthError naming the setting.
 */
export function loadNatsAuth(
  settings: NatsAuthSettings,
  names: NatsSettingNames = flagNames('servers'),
): NatsAuth {
  const parsed = parseServers(names.servers, settings.servers);
  const shown = redactServers(settings.servers);
  const auth: NatsAuth = { servers: parsed.servers, shown, mode: 'none' };

  if (settings.password !== undefined && settings.passwordFile !== undefined)
    throw new NatsAuthError(names.passwordFile, `give the password once: ${names.password} is set too`);
  if (settings.token !== undefined && settings.tokenFile !== undefined)
    throw new NatsAuthError(names.tokenFile, `give the token once: ${names.token} is set too`);

  // Each identity, with the setting that asked for it: more than one is refused.
  const modes: Array<{ mode: NatsAuthMode; by: string }> = [];
  if (settings.user !== undefined || settings.password !== undefined || settings.passwordFile !== undefined)
    modes.push({ mode: 'user', by: settings.user !== undefined ? names.user : names.passwordFile });
  if (parsed.user !== undefined) modes.push({ mode: 'user', by: `the user:password in ${names.servers}` });
  if (settings.token !== undefined || settings.tokenFile !== undefined)
    modes.push({ mode: 'token', by: settings.token !== undefined ? names.token : names.tokenFile });
  if (parsed.token !== undefined) modes.push({ mode: 'token', by: `the token in ${names.servers}` });
  if (settings.nkeyFile !== undefined) modes.push({ mode: 'nkey', by: names.nkeyFile });
  if (settings.creds !== undefined) modes.push({ mode: 'creds', by: names.creds });
  if (modes.length > 1)
    throw new NatsAuthError(
      modes[1]!.by,
      `one identity per connection: ${modes[0]!.by} is set too (user + password, a token, an nkey or a .creds file)`,
    );
  const mode = modes[0]?.mode ?? 'none';
  auth.mode = mode;

  if (mode === 'user') {
    if (parsed.user !== undefined) {
      auth.user = parsed.user;
      auth.pass = parsed.pass!;
    } else {
      if (settings.user === undefined || settings.user === '')
        throw new NatsAuthError(names.user, `a password without a user (${names.user})`);
      if (settings.password === undefined && settings.passwordFile === undefined)
        throw new NatsAuthError(
          names.user,
          `a user without a password (${names.passwordFile} or ${names.password})`,
        );
      auth.user = settings.user;
      if (settings.password !== undefined) {
        if (settings.password === '') throw new NatsAuthError(names.password, 'is empty');
        auth.pass = settings.password;
      } else auth.pass = readSecret(names.passwordFile, settings.passwordFile!);
    }
  } else if (mode === 'token') {
    if (parsed.token !== undefined) auth.token = parsed.token;
    else if (settings.token !== undefined) {
      if (settings.token === '') throw new NatsAuthError(names.token, 'is empty');
      auth.token = settings.token;
    } else auth.token = readSecret(names.tokenFile, settings.tokenFile!);
  } else if (mode === 'nkey') {
    const file = settings.nkeyFile!;
    const lines = readSetting(names.nkeyFile, file)
      .split(/\r?\n/)
      .map((l) => l.trim())
      .filter((l) => l !== '' && !l.startsWith('#') && !l.startsWith('//'));
    const seed = lines.find((l) => l.startsWith('S')) ?? '';
    checkSeed(names.nkeyFile, file, seed);
    auth.seed = seed;
  } else if (mode === 'creds') {
    const file = settings.creds!;
    const text = readSetting(names.creds, file);
    const blocks = [...text.matchAll(CREDS_BLOCK)].map((m) => m[1]!.trim());
    if (blocks.length === 0 || !JWT.test(blocks[0]!))
      throw new NatsAuthError(names.creds, `${file} holds no user JWT (a .creds file as nsc writes it)`);
    if (blocks.length < 2) throw new NatsAuthError(names.creds, `${file} holds a JWT but no nkey seed`);
    checkSeed(names.creds, file, blocks[1]!);
    auth.creds = text;
  }

  const tls = settings.tls ?? {};
  const wantsTls =
    tls.ca !== undefined ||
    tls.cert !== undefined ||
    tls.key !== undefined ||
    tls.handshakeFirst === true ||
    parsed.servers.some((s) => s.toLowerCase().startsWith('tls://'));
  if (wantsTls) {
    if (tls.cert !== undefined && tls.key === undefined)
      throw new NatsAuthError(names.tlsCert, `a client certificate without its key (${names.tlsKey})`);
    if (tls.key !== undefined && tls.cert === undefined)
      throw new NatsAuthError(names.tlsKey, `a key without its client certificate (${names.tlsCert})`);
    const out: NonNullable<NatsAuth['tls']> = { handshakeFirst: tls.handshakeFirst === true };
    if (tls.ca !== undefined) out.ca = certificate(names.tlsCa, tls.ca).text;
    if (tls.cert !== undefined && tls.key !== undefined) {
      const { text, cert } = certificate(names.tlsCert, tls.cert);
      const keyText = pem(names.tlsKey, tls.key, 'private key');
      let key: ReturnType<typeof createPrivateKey>;
      try {
        key = createPrivateKey(keyText);
      } catch (error) {
        throw new NatsAuthError(
          names.tlsKey,
          `${tls.key} is not a PEM private key (${(error as Error).message})`,
        );
      }
      if (!cert.checkPrivateKey(key))
        throw new NatsAuthError(names.tlsKey, `${tls.key} is not the key of the certificate in ${tls.cert}`);
      out.cert = text;
      out.key = keyText;
    }
    auth.tls = out;
  }
  return auth;
}
