export { SigningKeyError } from './errors';
export type {
  ArtifactManifest,
  ManifestFile,
  ManifestSignature,
  RefusalReason,
  TrustedKeys,
  Verdict,
} from './manifest';
export {
  canonicalManifest,
  checkFile,
  keyIdOf,
  MANIFEST_FORMAT,
  parseManifest,
  parseSigningKey,
  parseTrustedKeys,
  publicKeyPem,
  REFUSAL_REASONS,
  signManifest,
  verifyManifest,
} from './manifest';
