import { execFileSync } from 'node:child_process';
import { generateKeyPairSync, type KeyObject } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import {
  type ArtifactManifest,
  canonicalManifest,
  checkFile,
  keyIdOf,
  parseManifest,
  parseSigningKey,
  parseTrustedKeys,
  publicKeyPem,
  SigningKeyError,
  signManifest,
  verifyManifest,
} from '.';

const ONNX = { sha256: 'a'.repeat(64), bytes: 1000 };
const CONFIG = { sha256: 'b'.repeat(64), bytes: 200 };

function manifest(overrides: Partial<ArtifactManifest> = {}): ArtifactManifest {
  return {
    format: 1,
    fleet: 'blue',
    model: 'digits',
    version: '3',
    files: { 'model.onnx': ONNX, 'config.json': CONFIG },
    ...overrides,
  };
}

function keyPair(): { privateKey: KeyObject; publicKey: KeyObject } {
  return generateKeyPairSync('ed25519');
}

const WANTED = { fleet: 'blue', model: 'digits', version: '3' };

describe('canonical manifest', () => {
  it('is one text whatever the key order, and parses back only in that form', () => {
    const text = canonicalManifest(manifest());
    expect(text).toBe(
      `{"files":{"config.json":{"bytes":200,"sha256":"${'b'.repeat(64)}"},"model.onnx":{"bytes":1000,"sha256":"${'a'.repeat(64)}"}},"fleet":"blue","format":1,"model":"digits","version":"3"}`,
    );
    const reordered = {
      version: '3',
      model: 'digits',
      fleet: 'blue',
      format: 1 as const,
      files: manifest().files,
    };
    expect(canonicalManifest(reordered)).toBe(text);
    expect(parseManifest(text)).toEqual(manifest());
    // The same meaning in another spelling is refused: a signature covers exactly one text.
    expect(parseManifest(JSON.stringify(JSON.parse(text), null, 1))).toBe('not in canonical form');
    expect(parseManifest('{')).toBe('not JSON');
  });

  it('refuses a malformed manifest by what is wrong', () => {
    expect(() => canonicalManifest(manifest({ files: {} }))).toThrow('files is empty');
    expect(() => canonicalManifest(manifest({ model: '../x' }))).toThrow('model is not a name');
    expect(() =>
      canonicalManifest(manifest({ files: { 'model.onnx': { sha256: 'XYZ', bytes: 1 } } })),
    ).toThrow('sha256 is not hex');
    expect(parseManifest(JSON.stringify({ ...manifest(), extra: 1 }))).toMatch(/^fields are/);
  });
});

describe('sign and verify', () => {
  const signer = keyPair();
  const trusted = new Map([[keyIdOf(signer.publicKey), signer.publicKey]]);

  it('a manifest signed by a trusted key verifies for the fleet, model and version it names', () => {
    const signed = signManifest(manifest(), signer.privateKey);
    expect(signed.keyId).toMatch(/^[0-9a-f]{16}$/);
    expect(signed.keyId).toBe(keyIdOf(signer.publicKey));
    const verdict = verifyManifest(signed, WANTED, trusted);
    expect(verdict).toEqual({ ok: true, manifest: manifest() });
  });

  it('refuses unsigned, an untrusted key, a forged signature and an edited manifest', () => {
    expect(verifyManifest(undefined, WANTED, trusted)).toMatchObject({ ok: false, reason: 'unsigned' });
    const other = keyPair();
    const byOther = signManifest(manifest(), other.privateKey);
    expect(verifyManifest(byOther, WANTED, trusted)).toMatchObject({ ok: false, reason: 'untrusted_key' });
    // Another key's signature under the trusted key's id.
    const forged = { ...byOther, keyId: keyIdOf(signer.publicKey) };
    expect(verifyManifest(forged, WANTED, trusted)).toMatchObject({ ok: false, reason: 'bad_signature' });
    // The manifest edited after signing (another digest for model.onnx).
    const signed = signManifest(manifest(), signer.privateKey);
    const edited = { ...signed, manifest: signed.manifest.replace('a'.repeat(64), 'c'.repeat(64)) };
    expect(verifyManifest(edited, WANTED, trusted)).toMatchObject({ ok: false, reason: 'bad_signature' });
    expect(verifyManifest({ ...signed, signature: 'not base64!' }, WANTED, trusted)).toMatchObject({
      ok: false,
      reason: 'bad_signature',
    });
  });

  it('a signature cannot be replayed for another fleet, model or version', () => {
    const signed = signManifest(manifest(), signer.privateKey);
    for (const wanted of [
      { ...WANTED, fleet: 'green' },
      { ...WANTED, model: 'upper' },
      { ...WANTED, version: '4' },
    ]) {
      const verdict = verifyManifest(signed, wanted, trusted);
      expect(verdict).toMatchObject({ ok: false, reason: 'wrong_artifact' });
      if (!verdict.ok) expect(verdict.detail).toBe('it was signed for fleet blue, model digits, version 3');
    }
  });

  it('checkFile accepts the pinned bytes and refuses others as tampered', () => {
    const m = manifest();
    expect(checkFile(m, 'model.onnx', ONNX)).toEqual({ ok: true });
    expect(checkFile(m, 'model.onnx', { ...ONNX, sha256: 'd'.repeat(64) })).toMatchObject({
      ok: false,
      reason: 'tampered',
    });
    expect(checkFile(m, 'model.onnx', { ...ONNX, bytes: 1001 })).toMatchObject({ reason: 'tampered' });
    expect(checkFile(m, 'tokenizer.json', ONNX)).toMatchObject({ reason: 'bad_manifest' });
  });
});

describe('key files', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'streaminfer-signing-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('reads an openssl Ed25519 key and its public key; both give the same key id', () => {
    const keyFile = path.join(dir, 'openssl.pem');
    execFileSync('openssl', ['genpkey', '-algorithm', 'ed25519', '-out', keyFile]);
    const pubFile = path.join(dir, 'openssl.pub');
    execFileSync('openssl', ['pkey', '-in', keyFile, '-pubout', '-out', pubFile]);
    const key = parseSigningKey(readFileSync(keyFile, 'utf8'), keyFile);
    const trusted = parseTrustedKeys(readFileSync(pubFile, 'utf8'), pubFile);
    expect([...trusted.keys()]).toEqual([keyIdOf(key)]);
    expect(verifyManifest(signManifest(manifest(), key), WANTED, trusted).ok).toBe(true);
  });

  it('a trusted-keys file holds several keys (rotation) and refuses anything else, naming the file', () => {
    const a = keyPair();
    const b = keyPair();
    const both = `${publicKeyPem(a.publicKey)}\n${publicKeyPem(b.privateKey)}`;
    expect([...parseTrustedKeys(both, 'keys.pem').keys()].sort()).toEqual(
      [keyIdOf(a.publicKey), keyIdOf(b.publicKey)].sort(),
    );
    const privatePem = a.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
    const rsa = generateKeyPairSync('rsa', { modulusLength: 1024 }).publicKey;
    const cases: Array<[string, RegExp]> = [
      ['', /keys\.pem: no PEM public key/],
      [privatePem, /keys\.pem: block 1 is a private key/],
      [publicKeyPem(rsa), /keys\.pem: public key 1 is rsa, not Ed25519/],
      [
        '-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n',
        /keys\.pem: public key 1 cannot be read/,
      ],
    ];
    for (const [text, message] of cases) {
      let error: unknown;
      try {
        parseTrustedKeys(text, 'keys.pem');
      } catch (err) {
        error = err;
      }
      expect(error).toBeInstanceOf(SigningKeyError);
      expect((error as Error).message).toMatch(message);
      // The message never carries key material.
      expect((error as Error).message).not.toContain('MC4CAQAw');
    }
  });

  it('a signing key must be an unencrypted Ed25519 PKCS#8 PEM key', () => {
    const rsa = generateKeyPairSync('rsa', { modulusLength: 1024 }).privateKey;
    const ed = keyPair().privateKey;
    expect(() => parseSigningKey(rsa.export({ type: 'pkcs8', format: 'pem' }).toString(), 'k.pem')).toThrow(
      'k.pem: the key is rsa, not Ed25519',
    );
    expect(() => parseSigningKey(publicKeyPem(ed), 'k.pem')).toThrow('k.pem: not a PEM PKCS#8 private key');
    const encrypted = ed
      .export({ type: 'pkcs8', format: 'pem', cipher: 'aes-256-cbc', passphrase: 'x' })
      .toString();
    expect(() => parseSigningKey(encrypted, 'k.pem')).toThrow('k.pem: the private key is encrypted');
  });
});
