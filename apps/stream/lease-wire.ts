/**
 * What the main thread (LeaseKeeper) and the lease thread share: the shared slots and the messages. Messages
 * carry lease events only (acquire, release, ownership and live-set changes), never per-event traffic: the
 * per-message fence reads the slots.
 */

import type { KvExpiry, KvExpiryWanted } from '../../libs/kv-expiry';
import type { NatsAuth } from '../../libs/nats-auth';
import { StreamIoError, type StreamIoErrorCode } from './errors';
import type { LeaseChange, ReleaseReason } from './leases';

/**
 * BigInt64Array slots (Atomics: a plain Float64 read of shared memory may tear): the main thread's heartbeat
 * (ms since epoch), then two per partition: its "valid until" (renewal sent + ttl; 0 when lost or released)
 * and the fencing token of the acquisition it is valid for (the claim's KV revision). The fence is per
 * acquisition: a loop of an earlier acquisition of the same partition sees another token and stops.
 */
export const SLOT_MAIN_BEAT = 0;
export const SLOT_PARTITIONS = 1;

export function untilSlot(partition: number): number {
  return SLOT_PARTITIONS + 2 * partition;
}

export function tokenSlot(partition: number): number {
  return SLOT_PARTITIONS + 2 * partition + 1;
}

export function slotBuffer(partitions: number): SharedArrayBuffer {
  return new SharedArrayBuffer((SLOT_PARTITIONS + 2 * partitions) * BigInt64Array.BYTES_PER_ELEMENT);
}

/**
 * The lease thread's write: the token first, then "valid until". A reader loads "valid until" first, so a
 * valid time it sees comes with its own acquisition's token or a later one — never the previous one's.
 */
export function storeFence(slots: BigInt64Array, partition: number, validUntil: number, token: number): void {
  Atomics.store(slots, tokenSlot(partition), BigInt(token));
  Atomics.store(slots, untilSlot(partition), BigInt(validUntil));
}

/** The main thread's read: valid now, and for the acquisition holding `token`. */
export function fenceHolds(slots: BigInt64Array, partition: number, token: number, now: number): boolean {
  if (now >= Number(Atomics.load(slots, untilSlot(partition)))) return false;
  return Number(Atomics.load(slots, tokenSlot(partition))) === token;
}

export interface ThreadInit {
  /** Plain strings only (structured clone): the thread builds its own authenticators from them. */
  auth: NatsAuth;
  connectionName: string;
  /** Replicas of the lease bucket when the thread creates it. */
  replicas: number;
  bucket: string;
  group: string;
  instanceId: string;
  partitions: number;
  ttlMs: number;
  reclaim: boolean;
  expiry: KvExpiryWanted;
  maxStallMs: number;
  slots: SharedArrayBuffer;
  logLevel: string;
  logBindings: Record<string, unknown>;
}

export interface WireError {
  name: string;
  code?: string;
  message: string;
}

export type ToThread =
  | { type: 'start' }
  | { type: 'peers'; id: number }
  | { type: 'answer'; id: number; error?: WireError }
  | { type: 'stop' };

export type FromThread =
  | { type: 'opened'; expiry: KvExpiry }
  | { type: 'failed'; error: WireError }
  | { type: 'acquire'; id: number; partition: number; token: number }
  | { type: 'release'; id: number; partition: number; reason: ReleaseReason; token: number }
  | { type: 'change'; change: LeaseChange }
  | { type: 'live'; live: string[] }
  | { type: 'peers'; id: number; peers?: string[]; error?: WireError }
  | { type: 'stopped' };

export function toWire(err: unknown): WireError {
  if (err instanceof Error) {
    const code = (err as { code?: unknown }).code;
    return { name: err.name, message: err.message, ...(typeof code === 'string' ? { code } : {}) };
  }
  return { name: 'Error', message: String(err) };
}

/** The same typed error on this side: a StreamIoError keeps its code, so callers branch on it as before. */
export function fromWire(wire: WireError): Error {
  if (wire.name === 'StreamIoError' && wire.code)
    return new StreamIoError(wire.code as StreamIoErrorCode, wire.message);
  const err = new Error(wire.message);
  err.name = wire.name;
  return err;
}
