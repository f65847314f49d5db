/**
 * Signed model artifacts: the canonical manifest of one model version as pushed to one fleet, its
 * Ed25519 signature, and the checks a host makes before it writes pulled bytes into its repository. Pure: takes
 * text, digests and keys (node:crypto KeyObjects), never reads a file; the caller reads key files and objects.
 */
import { createHash, createPrivateKey, createPublicKey, type KeyObject, sign, verify } from 'node:crypto';
import { SigningKeyError } from './errors';

export const MANIFEST_FORMAT = 1;

/** One file of a version as the manifest pins it: lowercase hex SHA-256 of its bytes and their count. */
export interface ManifestFile {
  sha256: string;
  bytes: number;
}

/**
 * What a signature binds: the fleet, model and version it was pushed as, and the digest of every file of the
 * version (`model.onnx`, `config.json`, …), keyed by the file's name in the version's artifact.
 */
export interface ArtifactManifest {
  format: typeof MANIFEST_FORMAT;
  fleet: string;
  model: string;
  version: string;
  files: Record<string, ManifestFile>;
}

/** The manifest as signed (its canonical text), the signature (base64) and the signer's key id. */
export interface ManifestSignature {
  manifest: string;
  signature: string;
  keyId: string;
}

/** Why a pulled artifact is refused; a bounded set (the refusal metric's `reason` label). */
export const REFUSAL_REASONS = Object.freeze([
  'unsigned',
  'untrusted_key',
  'bad_signature',
  'bad_manifest',
  'wrong_artifact',
  'tampered',
] as const);
export type RefusalReason = (typeof REFUSAL_REASONS)[number];

export type Verdict =
  | { ok: true; manifest: ArtifactManifest }
  | { ok: false; reason: RefusalReason; detail: string };

/** Trusted public keys by key id. */
export type TrustedKeys = ReadonlyMap<string, KeyObject>;

const SHA256_HEX = /^[0-9a-f]{64}$/;
const KEY_ID = /^[0-9a-f]{16}$/;
const FILE_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;
// Fleet, model and version names (a fleet may start with _ or -).
const NAME = /^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$/;
const MAX_MANIFEST_CHARS = 64 * 1024;
const PEM_BLOCK = /-----BEGIN ([A-Z0-9 ]+)-----[\s\S]*?-----END \1-----/g;

/** JSON with object keys sorted at every level and no whitespace: one text per manifest. */
function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (typeof value === 'object' && value !== null) {
    const entries = Object.keys(value)
      .sort()
      .map((key) => `${JSON.stringify(key)}:${canonicalJson((value as Record<string, unknown>)[key])}`);
    return `{${entries.join(',')}}`;
  }
  return JSON.stringify(value);
}

function manifestProblem(manifest: unknown): string | undefined {
  if (typeof manifest !== 'object' || manifest === null || Array.isArray(manifest)) return 'not an object';
  const m = manifest as Record<string, unknown>;
  const keys = Object.keys(m).sort().join(',');
  if (keys !== 'files,fleet,format,model,version') return `fields are ${keys}`;
  if (m.format !== MANIFEST_FORMAT) return `format ${String(m.format)} is not ${MANIFEST_FORMAT}`;
  for (const key of ['fleet', 'model', 'version'] as const)
    if (typeof m[key] !== 'string' || !NAME.test(m[key] as string)) return `${key} is not a name`;
  if (typeof m.files !== 'object' || m.files === null || Array.isArray(m.files))
    return 'files is not an object';
  const files = Object.entries(m.files as Record<string, unknown>);
  if (files.length === 0) return 'files is empty';
  for (const [name, file] of files) {
    if (!FILE_NAME.test(name)) return `file name ${JSON.stringify(name.slice(0, 64))} is not a name`;
    const f = file as Record<string, unknown> | null;
    if (typeof f !== 'object' || f === null || Object.keys(f).sort().join(',') !== 'bytes,sha256')
      return `file ${name} is not {sha256, bytes}`;
    if (typeof f.sha256 !== 'string' || !SHA256_HEX.test(f.sha256)) return `file ${name}: sha256 is not hex`;
    if (!Number.isSafeInteger(f.bytes) || (f.bytes as number) < 0)
      return `file ${name}: bytes is not a count`;
  }
  return undefined;
}

/** The canonical text of a manifest (what is signed). Throws on a manifest that is not well formed. */
export function canonicalManifest(manifest: ArtifactManifest): string {
  const problem = manifestProblem(manifest);
  if (problem) throw new Error(`invalid manifest: ${problem}`);
  return canonicalJson(manifest);
}

/** Parses a signed manifest text; only its canonical form is accepted (one text, one meaning). */
export function parseManifest(text: string): ArtifactManifest | string {
  if (text.length > MAX_MANIFEST_CHARS) return `longer than ${MAX_MANIFEST_CHARS} characters`;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return 'not JSON';
  }
  const problem = manifestProblem(parsed);
  if (problem) return problem;
  if (canonicalJson(parsed) !== text) return 'not in canonical form';
  return parsed as ArtifactManifest;
}

/** A public key's id: the first 16 hex digits of the SHA-256 of its DER SubjectPublicKeyInfo. */
export function keyIdOf(key: KeyObject): string {
  const publicKey = key.type === 'private' ? createPublicKey(key) : key;
  const der = publicKey.export({ type: 'spki', format: 'der' });
  return createHash('sha256').update(der).digest('hex').slice(0, 16);
}

/** An Ed25519 private key from PEM PKCS#8 text (`openssl genpkey -algorithm ed25519`); `source` names the file. */
export function parseSigningKey(pem: string, source: string): KeyObject {
  if (/-----BEGIN ENCRYPTED PRIVATE KEY-----/.test(pem))
    throw new SigningKeyError(`${source}: the private key is encrypted; give an unencrypted PKCS#8 PEM key`);
  if (!/-----BEGIN PRIVATE KEY-----/.test(pem))
    throw new SigningKeyError(
      `${source}: not a PEM PKCS#8 private key (expected "-----BEGIN PRIVATE KEY-----"; make one with streaminfer models keygen)`,
    );
  let key: KeyObject;
  try {
    key = createPrivateKey({ key: pem, format: 'pem' });
  } catch {
    throw new SigningKeyError(`${source}: the private key cannot be read`);
  }
  if (key.asymmetricKeyType !== 'ed25519')
    throw new SigningKeyError(`${source}: the key is ${key.asymmetricKeyType ?? 'unknown'}, not Ed25519`);
  return key;
}

/**
 * Trusted Ed25519 public keys from PEM text holding one or more `PUBLIC KEY` blocks (`cat old.pub new.pub`).
 * A private key in the file is refused: it must never sit on the hosts.
 */
export function parseTrustedKeys(pem: string, source: string): TrustedKeys {
  const keys = new Map<string, KeyObject>();
  let index = 0;
  for (const match of pem.matchAll(PEM_BLOCK)) {
    index++;
    if (match[1] !== 'PUBLIC KEY')
      throw new SigningKeyError(
        `${source}: block ${index} is a ${match[1]!.includes('PRIVATE') ? 'private key' : match[1]}; give Ed25519 public keys only ("-----BEGIN PUBLIC KEY-----")`,
      );
    let key: KeyObject;
    try {
      key = createPublicKey({ key: match[0], format: 'pem' });
    } catch {
      throw new SigningKeyError(`${source}: public key ${index} cannot be read`);
    }
    if (key.asymmetricKeyType !== 'ed25519')
      throw new SigningKeyError(`${source}: public key ${index} is ${key.asymmetricKeyType}, not Ed25519`);
    keys.set(keyIdOf(key), key);
  }
  if (keys.size === 0)
    throw new SigningKeyError(`${source}: no PEM public key ("-----BEGIN PUBLIC KEY-----")`);
  return keys;
}

/** Signs a manifest's canonical text with an Ed25519 private key. */
export function signManifest(manifest: ArtifactManifest, key: KeyObject): ManifestSignature {
  const text = canonicalManifest(manifest);
  return {
    manifest: text,
    signature: sign(null, Buffer.from(text, 'utf8'), key).toString('base64'),
    keyId: keyIdOf(key),
  };
}

/**
 * Checks a signed manifest against the trusted keys and what the host asked for (fleet, model, version), so a
 * signature made for another fleet, model or version is refused. Undefined: the artifact carries none.
 */
export function verifyManifest(
  signed: ManifestSignature | undefined,
  expected: { fleet: string; model: string; version: string },
  trusted: TrustedKeys,
): Verdict {
  if (signed === undefined) return { ok: false, reason: 'unsigned', detail: 'it carries no signature' };
  const key = KEY_ID.test(signed.keyId) ? trusted.get(signed.keyId) : undefined;
  if (key === undefined)
    return {
      ok: false,
      reason: 'untrusted_key',
      detail: `signed by key ${signed.keyId.replace(/[^0-9a-f]/g, '?').slice(0, 16)}, not one of the trusted keys (${[...trusted.keys()].join(', ')})`,
    };
  const signature = Buffer.from(signed.signature, 'base64');
  let valid = false;
  try {
    valid = signature.length === 64 && verify(null, Buffer.from(signed.manifest, 'utf8'), key, signature);
  } catch {
    valid = false;
  }
  if (!valid)
    return {
      ok: false,
      reason: 'bad_signature',
      detail: `the signature does not verify with key ${signed.keyId}`,
    };
  const manifest = parseManifest(signed.manifest);
  if (typeof manifest === 'string')
    return { ok: false, reason: 'bad_manifest', detail: `the manifest is ${manifest}` };
  for (const key of ['fleet', 'model', 'version'] as const)
    if (manifest[key] !== expected[key])
      return {
        ok: false,
        reason: 'wrong_artifact',
        detail: `it was signed for fleet ${manifest.fleet}, model ${manifest.model}, version ${manifest.version}`,
      };
  return { ok: true, manifest };
}

/** Whether bytes with this digest and length are the manifest's `name`; a refusal says what differs. */
export function checkFile(
  manifest: ArtifactManifest,
  name: string,
  actual: ManifestFile,
): { ok: true } | { ok: false; reason: RefusalReason; detail: string } {
  const pinned = Object.hasOwn(manifest.files, name) ? manifest.files[name] : undefined;
  if (pinned === undefined)
    return { ok: false, reason: 'bad_manifest', detail: `the manifest does not list ${name}` };
  if (pinned.sha256 !== actual.sha256 || pinned.bytes !== actual.bytes)
    return {
      ok: false,
      reason: 'tampered',
      detail: `${name} is ${actual.bytes} bytes with sha256 ${actual.sha256}; signed were ${pinned.bytes} bytes with sha256 ${pinned.sha256}`,
    };
  return { ok: true };
}

/** The public half of a key, as PEM SubjectPublicKeyInfo (what a trusted-keys file holds). */
export function publicKeyPem(key: KeyObject): string {
  const publicKey = key.type === 'private' ? createPublicKey(key) : key;
  return publicKey.export({ type: 'spki', format: 'pem' }).toString();
}
