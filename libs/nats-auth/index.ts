/**
 * NATS connection settings shared by every connection StreamInfer makes: one option set (servers, one
 * identity, TLS), checked and loaded up front (files read here), turned into nats.js options, and the
 * redaction every printed server list goes through.
 */
export { NatsAuthError } from './errors';
export { loadNatsAuth, type NatsAuth, type NatsAuthMode } from './load';
export {
  describeRefusal,
  describeStatusProblem,
  type NatsIdentityOptions,
  type NatsRefusal,
  natsConnectionOptions,
  natsRefusal,
} from './options';
export { REDACTED, redactNatsUrls, redactServers } from './redact';
export {
  describeReplicasRefusal,
  isPeerOffline,
  MAX_REPLICAS,
  replicasProblem,
  replicasShortfall,
} from './replicas';
export {
  type FlatNatsSettings,
  flagNames,
  mergeNatsSettings,
  NATS_ENV,
  NATS_FLAGS,
  type NatsAuthSettings,
  type NatsSettingName,
  type NatsSettingNames,
  type NatsTlsSettings,
  natsSettingsFromEnv,
  natsSettingsFromKeys,
  parseFlagWord,
} from './settings';
