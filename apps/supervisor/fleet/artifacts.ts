/**
 * Model artifacts shared by the fleet: Object Store `streaminfer_models_<F>`, objects `<model>/config.json`
 * and `<model>/<version>/model.onnx`. The checksum is the store's own digest, ObjectInfo.digest, which nats.js
 * writes as `SHA-256=<base64url, padded>` of the object's bytes (the Go client writes the same form; nats.js
 * also accepts hex after the prefix, so both are read here). This module speaks lowercase hex SHA-256.
 * A fetched file is written beside its target, hashed as it is written, and renamed into place only when its
 * hash is the store's digest: a host never loads a half-written or corrupted model.
 *
 * Signed artifacts: `push` with a signing key puts the version's signed manifest (libs/signing: fleet,
 * model, version, sha256 and size of model.onnx and config.json) in model.onnx's object metadata, written in the
 * same meta record as the digest, and a copy of config.json at `<model>/<version>/config.json` (the model-level
 * one is replaced by every push of any version). A host with trusted keys verifies what it pulls before it is
 * renamed into place: the signature by a trusted key, the manifest naming this fleet, model and version, and the
 * bytes matching its digests; else ArtifactRefusedError. The trust boundary is NATS: bytes already in the host's
 * repository (put there by the operator, or pulled and verified before) are not re-verified.
 *
 * The pull cache: a host writes what it pulls into `<stateDir>/models` (pullCacheDir), never into its
 * models dir — under the shipped systemd unit (ProtectSystem=strict) that one is read-only, the state directory
 * (StateDirectory=) is not. The repository scan reads both (libs/registry readModel): a version in both is read
 * from the cache (it holds only bytes verified against the store, pulled because the models dir lacked them or
 * differed); config.json from the models dir, else from the cache.
 */
import { createHash, type KeyObject, randomBytes } from 'node:crypto';
import { constants, createReadStream, createWriteStream } from 'node:fs';
import { access, mkdir, readFile, rename, rm, stat } from 'node:fs/promises';
import * as path from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import type { ObjectInfo, ObjectStore } from '@nats-io/obj';
import {
  type ArtifactManifest,
  checkFile,
  type ManifestSignature,
  type RefusalReason,
  signManifest,
  type TrustedKeys,
  verifyManifest,
} from '../../../libs/signing';
import type { FleetConnection } from './connection';
import { ArtifactRefusedError, FleetError } from './errors';
import { openObjectStore } from './kv-bucket';

const DIGEST_PREFIX = 'SHA-256=';

/** Where a host writes the model versions it pulls from the fleet: `<stateDir>/models`. */
export function pullCacheDir(stateDir: string): string {
  return path.resolve(stateDir, 'models');
}

/**
 * A pull that cannot write its directory said plainly (EROFS, EACCES, EPERM): which directory, and the setting
 * that moves it. Other errors are returned as they are.
 */
export function unwritable(error: unknown, dir: string): unknown {
  const code = (error as NodeJS.ErrnoException)?.code;
  if (code !== 'EROFS' && code !== 'EACCES' && code !== 'EPERM') return error;
  const why =
    code === 'EROFS' ? 'is on a read-only file system (EROFS)' : `is not writable by this user (${code})`;
  return new FleetError(
    'artifact_unwritable',
    `cannot write pulled model files: ${dir} ${why}; pulled versions go to <stateDir>/models: set STREAMINFER_STATE_DIR (config key stateDir) to a writable directory (the systemd unit's StateDirectory=, /var/lib/streaminfer)`,
    { cause: error },
  );
}
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
    throw new FleetError('invalid_options', `${what} must match ${NAME_PATTERN.source} (got ${value})`);
  return value;
}

export function configObject(model: string): string {
  return `${requireName('model', model)}/config.json`;
}

export function modelObject(model: string, version: string): string {
  return `${requireName('model', model)}/${requireName('version', version)}/model.onnx`;
}

/** The config.json a version was pushed (and signed) with. */
export function versionConfigObject(model: string, version: string): string {
  return `${requireName('model', model)}/${requireName('version', version)}/config.json`;
}

// model.onnx's object metadata: the signed manifest, its signature (base64) and the signer's key id.
const META_MANIFEST = 'streaminfer-manifest';
const META_SIGNATURE = 'streaminfer-signature';
const META_KEY_ID = 'streaminfer-key-id';

function signatureOf(info: ObjectInfo): ManifestSignature | undefined {
  const meta = info.metadata ?? {};
  const [manifest, signature, keyId] = [meta[META_MANIFEST], meta[META_SIGNATURE], meta[META_KEY_ID]];
  if (manifest === undefined && signature === undefined && keyId === undefined) return undefined;
  return { manifest: manifest ?? '', signature: signature ?? '', keyId: keyId ?? '' };
}

/** What a host checks pulled artifacts against. */
export interface ArtifactTrust {
  /** The keys a pulled version must be signed by, read now (they rotate); undefined: checksum only. */
  keys(): TrustedKeys | undefined;
  /** Told of every refusal before it is thrown (the log line and the metric). */
  refused?(error: ArtifactRefusedError): void;
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

/** A fetched file must also be the one a verified manifest pins. */
interface Pinned {
  manifest: ArtifactManifest;
  file: string;
  model: string;
  version: string;
}

/** ok: the local file is the pushed one. mismatch: it differs. missing: no local file. not_pushed: none in the store. */
export type LocalVerdict = 'ok' | 'mismatch' | 'missing' | 'not_pushed';

export class ModelArtifacts {
  private constructor(
    private readonly conn: FleetConnection,
    private readonly store: ObjectStore,
    private readonly trust: ArtifactTrust | undefined,
    private readonly cacheDir: string | undefined,
  ) {}

  /**
   * Opens the fleet's model store, creating it when missing. With `trust`, pulled versions are verified. With
   * `cacheDir` (pullCacheDir), pulled files are written there instead of into the models dir.
   */
  static async open(
    conn: FleetConnection,
    trust?: ArtifactTrust,
    cacheDir?: string,
  ): Promise<ModelArtifacts> {
    const bucket = conn.names.modelsBucket;
    const store = await openObjectStore(conn, bucket);
    return new ModelArtifacts(conn, store, trust, cacheDir);
  }

  /**
   * Uploads config.json and model.onnx (replacing what is there); returns the model's digest. With a signing key
   * (Ed25519), the version's manifest is signed and stored in model.onnx's metadata; without, none is (a
   * signature left by an earlier push of the version is replaced with the object).
   */
  async push(
    model: string,
    version: string,
    onnxPath: string,
    configPath: string,
    signingKey?: KeyObject,
  ): Promise<ArtifactDigest & { keyId?: string }> {
    const name = modelObject(model, version);
    const config = await readFile(configPath);
    const local = await fileSha256(onnxPath);
    const size = (await stat(onnxPath)).size;
    const signed =
      signingKey &&
      signManifest(
        {
          format: 1,
          fleet: this.conn.fleet,
          model,
          version,
          files: {
            'config.json': {
              sha256: createHash('sha256').update(config).digest('hex'),
              bytes: config.length,
            },
            'model.onnx': { sha256: local, bytes: size },
          },
        },
        signingKey,
      );
    return this.conn.call(`push ${name}`, async () => {
      await this.store.putBlob({ name: configObject(model) }, config);
      await this.store.putBlob({ name: versionConfigObject(model, version) }, config);
      const web = Readable.toWeb(createReadStream(onnxPath)) as unknown as ReadableStream<Uint8Array>;
      const metadata = signed
        ? {
            [META_MANIFEST]: signed.manifest,
            [META_SIGNATURE]: signed.signature,
            [META_KEY_ID]: signed.keyId,
          }
        : undefined;
      const info = await this.store.put(metadata ? { name, metadata } : { name }, web);
      const sha256 = digestHex(info.digest);
      // The file changed while it was read (a build still writing it): the store holds neither version.
      if (sha256 !== local || info.size !== size)
        throw new FleetError('checksum_mismatch', `${onnxPath} changed during the upload of ${name}`);
      return { sha256, bytes: info.size, ...(signed ? { keyId: signed.keyId } : {}) };
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
   * With trusted keys, whatever is pulled is verified first: ArtifactRefusedError, nothing written.
   */
  async fetchInto(
    modelsDir: string,
    model: string,
    version: string,
  ): Promise<ArtifactDigest & { fetched: boolean; keyId?: string }> {
    const name = modelObject(model, version);
    const info = await this.info(name);
    const expected = info ? digestHex(info.digest) : undefined;
    if (!info || expected === undefined)
      throw new FleetError('artifact_missing', `${name} is not in ${this.conn.names.modelsBucket}`);
    const target = this.cacheDir ?? modelsDir;
    const configFile = path.join(target, model, 'config.json');
    const file = path.join(target, model, version, 'model.onnx');
    const haveConfig =
      (await exists(path.join(modelsDir, model, 'config.json'))) || (await exists(configFile));
    const haveModel = await this.haveModel(modelsDir, model, version, expected);
    const keys = this.trust?.keys();
    if (keys === undefined) {
      if (!haveConfig) await this.fetchFile(configObject(model), configFile);
      if (haveModel) return { sha256: expected, bytes: info.size, fetched: false };
      return { ...(await this.fetchFile(name, file)), fetched: true };
    }
    // Nothing to pull: the bytes on disk are the host's own (the trust boundary is NATS).
    if (haveConfig && haveModel) return { sha256: expected, bytes: info.size, fetched: false };
    const signed = signatureOf(info);
    const verdict = verifyManifest(signed, { fleet: this.conn.fleet, model, version }, keys);
    if (!verdict.ok) throw this.refuse(model, version, verdict.reason, verdict.detail);
    const pin = (file: string): Pinned => ({ manifest: verdict.manifest, file, model, version });
    // The store's object must be the signed bytes before any of it is read.
    const stored = checkFile(verdict.manifest, 'model.onnx', { sha256: expected, bytes: info.size });
    if (!stored.ok) throw this.refuse(model, version, stored.reason, stored.detail);
    if (!haveConfig) {
      const configName = versionConfigObject(model, version);
      if (!(await this.info(configName)))
        throw this.refuse(model, version, 'tampered', `${configName}, signed with it, is not in the store`);
      await this.fetchFile(configName, configFile, pin('config.json'));
    }
    const keyId = signed!.keyId;
    if (haveModel) return { sha256: expected, bytes: info.size, fetched: false, keyId };
    return { ...(await this.fetchFile(name, file, pin('model.onnx'))), fetched: true, keyId };
  }

  /**
   * Whether the version's bytes are the pushed ones where the repository reads them: the cache's file when there
   * is one (it wins), else the models dir's. The models dir holding the pushed bytes drops a stale cache copy.
   */
  private async haveModel(modelsDir: string, model: string, version: string, expected: string) {
    const own = path.join(modelsDir, model, version, 'model.onnx');
    const ownOk = (await exists(own)) && (await fileSha256(own)) === expected;
    if (this.cacheDir === undefined) return ownOk;
    const cached = path.join(this.cacheDir, model, version, 'model.onnx');
    if (!(await exists(cached))) return ownOk;
    if ((await fileSha256(cached)) === expected) return true;
    if (!ownOk) return false;
    try {
      await rm(path.dirname(cached), { recursive: true, force: true });
    } catch (error) {
      throw unwritable(error, path.dirname(cached));
    }
    return true;
  }

  private refuse(
    model: string,
    version: string,
    reason: RefusalReason,
    detail: string,
  ): ArtifactRefusedError {
    const error = new ArtifactRefusedError(model, version, reason, detail);
    this.trust?.refused?.(error);
    return error;
  }

  private async info(name: string): Promise<ObjectInfo | undefined> {
    const info = await this.conn.call(`info ${name}`, () => this.store.info(name));
    return info && !info.deleted ? info : undefined;
  }

  /** Streams one object to `target` through a temp file in the same directory, then renames it. */
  private async fetchFile(name: string, target: string, pinned?: Pinned): Promise<ArtifactDigest> {
    const dir = path.dirname(target);
    try {
      await mkdir(dir, { recursive: true });
      await access(dir, constants.W_OK);
    } catch (error) {
      throw await unwritableAncestor(error, dir);
    }
    const temp = `${target}.${randomBytes(4).toString('hex')}.part`;
    try {
      return await this.conn.call(`fetch ${name}`, async () => {
        const result = await this.store.get(name);
        const expected = result ? digestHex(result.info.digest) : undefined;
        if (!result || expected === undefined)
          throw new FleetError('artifact_missing', `${name} is not in ${this.conn.names.modelsBucket}`);
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
            throw new FleetError('checksum_mismatch', `${name}: ${err.message}`, { cause: err });
          throw err;
        }
        const sha256 = hash.digest('hex');
        if (sha256 !== expected)
          throw new FleetError(
            'checksum_mismatch',
            `${name}: fetched bytes hash to ${sha256}, the store's digest is ${expected}`,
          );
        if (pinned) {
          const check = checkFile(pinned.manifest, pinned.file, { sha256, bytes });
          if (!check.ok) throw this.refuse(pinned.model, pinned.version, check.reason, check.detail);
        }
        await rename(temp, target);
        return { sha256, bytes };
      });
    } finally {
      await rm(temp, { force: true });
    }
  }
}

/**
 * mkdir -p under a read-only mount fails with ENOENT (Node's recursive mkdir), which hides the cause: the
 * nearest directory that exists is asked whether it can be written, and that answer is given instead.
 */
async function unwritableAncestor(error: unknown, dir: string): Promise<unknown> {
  const mapped = unwritable(error, dir);
  if (mapped !== error) return mapped;
  for (let at = dir; ; at = path.dirname(at)) {
    if (await isDirectory(at)) {
      try {
        await access(at, constants.W_OK);
        return error;
      } catch (denied) {
        const plain = unwritable(denied, at);
        return plain === denied ? error : plain;
      }
    }
    if (path.dirname(at) === at) return error;
  }
}

async function isDirectory(dir: string): Promise<boolean> {
  try {
    return (await stat(dir)).isDirectory();
  } catch {
    return false;
  }
}

async function exists(file: string): Promise<boolean> {
  try {
    return (await stat(file)).isFile();
  } catch {
    return false;
  }
}
