/**
 * Model artifacts shared by the fleet: Object Store `streaminfer_models_<F>`, objects `<model>/config.json`
 * and `<model>/<version>/model.onnx`. The checksum is the store's own digest, ObjectInfo.digest, which nats.js
 * writes as `SHA-256=<base64url, padded>` of the object's bytes (the Go client writes the same form; nats.js
 * also accepts hex after the prefix, so both are read here). This module speaks lowercase hex SHA-256.
 * A fetched file is written beside its target, hashed as it is written, and renamed into place only when its
 * hash is the store's digest: a host never loads a half-written or corrupted model.
 */
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, readFile, rename, rm, stat } from 'node:fs/promises';
import * as path from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import { type ObjectInfo, type ObjectStore, Objm } from '@nats-io/obj';
import type { ClusterConnection } from './connection';
import { ClusterError } from './errors';

const DIGEST_PREFIX = 'SHA-256=';
// The repository's model name rule (libs/registry/repository.ts); versions follow it too. No '/', no '..'.
const NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

/** `SHA-256=<base64url|hex>` → lowercase hex; undefined for another digest type. */
export function digestHex(digest: string): string | undefined {
  if (!digest.startsWith(DIGEST_PREFIX)) return undefined;
  const value = digest.slice(DIGEST_PREFIX.length);
  if (/^[0-9a-fA-F]{64}$/.test(value)) return value.toLowerCase();
  const bytes = Buffer.from(value.replace(/=+$/, ''), 'base64url');
  return bytes.length === 32 ? bytes.toString('hex') : undefined;
}

function requireName(what: string, value: string): string {
  if (typeof value !== 'string' || !NAME_PATTERN.test(value))
    throw new ClusterError('invalid_options', `${what} must match ${NAME_PATTERN.source} (got ${value})`);
  return value;
}

export function configObject(model: string): string {
  return `${requireName('model', model)}/config.json`;
}

export function modelObject(model: string, version: string): string {
  return `${requireName('model', model)}/${requireName('version', version)}/model.onnx`;
}

export async function fileSha256(file: string): Promise<string> {
  const hash = createHash('sha256');
  await pipeline(createReadStream(file), hash);
  return hash.digest('hex');
}

export interface ArtifactDigest {
  /** Lowercase hex SHA-256 of the bytes. */
  sha256: string;
  bytes: number;
}

/** ok: the local file is the pushed one. mismatch: it differs. missing: no local file. not_pushed: none in the store. */
export type LocalVerdict = 'ok' | 'mismatch' | 'missing' | 'not_pushed';

export class ModelArtifacts {
  private constructor(
    private readonly conn: ClusterConnection,
    private readonly store: ObjectStore,
  ) {}

  /** Opens the fleet's model store, creating it when missing. */
  static async open(conn: ClusterConnection): Promise<ModelArtifacts> {
    const bucket = conn.names.modelsBucket;
    const store = await conn.call(`object store ${bucket}`, () => new Objm(conn.js).create(bucket));
    return new ModelArtifacts(conn, store);
  }

  /** Uploads config.json and model.onnx (replacing what is there); returns the model's digest. */
  async push(model: string, version: string, onnxPath: string, configPath: string): Promise<ArtifactDigest> {
    const name = modelObject(model, version);
    const config = await readFile(configPath);
    const local = await fileSha256(onnxPath);
    return this.conn.call(`push ${name}`, async () => {
      await this.store.putBlob({ name: configObject(model) }, config);
      const web = Readable.toWeb(createReadStream(onnxPath)) as unknown as ReadableStream<Uint8Array>;
      const info = await this.store.put({ name }, web);
      const sha256 = digestHex(info.digest);
      // The file changed while it was read (a build still writing it): the store holds neither version.
      if (sha256 !== local)
        throw new ClusterError('checksum_mismatch', `${onnxPath} changed during the upload of ${name}`);
      return { sha256, bytes: info.size };
    });
  }

  /** The pushed model's hex SHA-256, or undefined when it was never pushed (or deleted). */
  async digest(model: string, version: string): Promise<string | undefined> {
    const info = await this.info(modelObject(model, version));
    return info ? digestHex(info.digest) : undefined;
  }

  /** How the local `<modelsDir>/<model>/<version>/model.onnx` compares with the pushed one. */
  async verifyLocal(modelsDir: string, model: string, version: string): Promise<LocalVerdict> {
    const expected = await this.digest(model, version);
    if (expected === undefined) return 'not_pushed';
    const file = path.join(modelsDir, model, version, 'model.onnx');
    if (!(await exists(file))) return 'missing';
    return (await fileSha256(file)) === expected ? 'ok' : 'mismatch';
  }

  /**
   * Puts the pushed model at `<modelsDir>/<model>/<version>/model.onnx` (and the model's config.json when the
   * host has none), verified against the store's digest. Already there and identical: nothing is fetched.
   * Not pushed: artifact_missing. Bytes that do not hash to the digest: checksum_mismatch, nothing left behind.
   */
  async fetchInto(
    modelsDir: string,
    model: string,
    version: string,
  ): Promise<ArtifactDigest & { fetched: boolean }> {
    const name = modelObject(model, version);
    const info = await this.info(name);
    const expected = info ? digestHex(info.digest) : undefined;
    if (!info || expected === undefined)
      throw new ClusterError('artifact_missing', `${name} is not in ${this.conn.names.modelsBucket}`);
    const configFile = path.join(modelsDir, model, 'config.json');
    if (!(await exists(configFile))) await this.fetchFile(configObject(model), configFile);
    const file = path.join(modelsDir, model, version, 'model.onnx');
    if ((await exists(file)) && (await fileSha256(file)) === expected)
      return { sha256: expected, bytes: info.size, fetched: false };
    const written = await this.fetchFile(name, file);
    return { ...written, fetched: true };
  }

  private async info(name: string): Promise<ObjectInfo | undefined> {
    const info = await this.conn.call(`info ${name}`, () => this.store.info(name));
    return info && !info.deleted ? info : undefined;
  }

  /** Streams one object to `target` through a temp file in the same directory, then renames it. */
  private async fetchFile(name: string, target: string): Promise<ArtifactDigest> {
    await mkdir(path.dirname(target), { recursive: true });
    const temp = `${target}.${randomBytes(4).toString('hex')}.part`;
    try {
      return await this.conn.call(`fetch ${name}`, async () => {
        const result = await this.store.get(name);
        const expected = result ? digestHex(result.info.digest) : undefined;
        if (!result || expected === undefined)
          throw new ClusterError('artifact_missing', `${name} is not in ${this.conn.names.modelsBucket}`);
        const hash = createHash('sha256');
        let bytes = 0;
        const tap = new Transform({
          transform(chunk: Buffer, _encoding, done) {
            hash.update(chunk);
            bytes += chunk.length;
            done(null, chunk);
          },
        });
        try {
          const source = Readable.fromWeb(result.data as unknown as WebReadableStream<Uint8Array>);
          await pipeline(source, tap, createWriteStream(temp));
          const failed = await result.error;
          if (failed) throw failed;
        } catch (err) {
          // nats.js checks the digest itself and fails the stream: "received a corrupt object, digests do not match".
          if (err instanceof Error && /digests do not match/.test(err.message))
            throw new ClusterError('checksum_mismatch', `${name}: ${err.message}`, { cause: err });
          throw err;
        }
        const sha256 = hash.digest('hex');
        if (sha256 !== expected)
          throw new ClusterError(
            'checksum_mismatch',
            `${name}: fetched bytes hash to ${sha256}, the store's digest is ${expected}`,
          );
        await rename(temp, target);
        return { sha256, bytes };
      });
    } finally {
      await rm(temp, { force: true });
    }
  }
}

async function exists(file: string): Promise<boolean> {
  try {
    return (await stat(file)).isFile();
  } catch {
    return false;
  }
}
