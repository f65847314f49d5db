/**
 * The data port's certificate files, read and checked (libs/config checkTlsMaterial) at every boundary that
 * takes them: `serve` before anything forks, the supervisor on a configuration reload, a node before it swaps
 * its listener. Errors are ConfigErrors naming the setting and the file.
 */
import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import {
  ConfigError,
  type ConfigSource,
  checkTlsMaterial,
  type TlsFileText,
  type TlsSettingKey,
} from '../../libs/config';
import type { NodeTls } from '../../libs/registry';

export interface TlsPaths {
  tlsCert: string | undefined;
  tlsKey: string | undefined;
  tlsClientCa: string | undefined;
}

export interface LoadedTls {
  tls: NodeTls;
  warnings: string[];
}

function readTlsFile(file: string, setting: TlsSettingKey, source: ConfigSource): TlsFileText {
  const absolute = path.resolve(file);
  try {
    return { path: absolute, text: readFileSync(absolute, 'utf8') };
  } catch (error) {
    const reason = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
    throw new ConfigError(`cannot read ${setting} file ${absolute}: ${reason}`, setting, source);
  }
}

/** Reads and checks the files the settings name; undefined when TLS is off. Throws ConfigError. */
export function loadTls(
  paths: TlsPaths,
  now: number,
  sources: Partial<Record<TlsSettingKey, ConfigSource>> = {},
): LoadedTls | undefined {
  if (paths.tlsCert === undefined || paths.tlsKey === undefined) return undefined;
  const cert = readTlsFile(paths.tlsCert, 'tlsCert', sources.tlsCert ?? 'flag');
  const key = readTlsFile(paths.tlsKey, 'tlsKey', sources.tlsKey ?? 'flag');
  const clientCa =
    paths.tlsClientCa === undefined
      ? undefined
      : readTlsFile(paths.tlsClientCa, 'tlsClientCa', sources.tlsClientCa ?? 'flag');
  const material = checkTlsMaterial(clientCa ? { cert, key, clientCa } : { cert, key }, now, sources);
  const tls: NodeTls = { certFile: cert.path, keyFile: key.path, certFingerprint: material.certFingerprint };
  if (clientCa) {
    tls.clientCaFile = clientCa.path;
    tls.clientCaFingerprint = material.clientCaFingerprint!;
  }
  return { tls, warnings: material.warnings };
}

/** The same files, re-read: a node about to swap its listener checks what uWS is about to load. */
export function reloadTls(current: NodeTls, now: number): LoadedTls {
  return loadTls(
    { tlsCert: current.certFile, tlsKey: current.keyFile, tlsClientCa: current.clientCaFile },
    now,
  )!;
}
