/**
 * What the main thread (LeaseKeeper) and the lease thread share: the shared slots and the messages. Messages
 * carry lease events only (acquire, release, ownership and live-set changes), never per-event traffic: the
 * per-message fence reads the slots.
 */

import type { KvExpiry, KvExpiryWanted } from '../../../libs/jetstream';
import type { NatsAuth } from '../../../libs/nats-auth';
import { PipelineIoError, type PipelineIoErrorCode } from '../errors';
import type { LeaseChange, ReleaseReason } from './lease-types';

/**
 * The shared memory: the main thread's heartbeat (ms since epoch, a BigInt64 slot: Atomics, since a plain
 * Float64 read of shared memory may tear), then each partition's fence: its "valid until" (renewal sent +
 * ttl; 0 when lost or released) and the fencing token of the acquisition it is valid for (the claim's KV
 * revision). The fence is per acquisition: a loop of an earlier acquisition of the same partition sees
 * another token and stops. A fence is five Uint32 words, [sequence, until high, until low, token high, token
 * low], written under a sequence lock by its only writer, the lease thread: the main thread reads it with a
 * few Atomics loads and no allocation (a BigInt64 load allocates a BigInt), on every event.
 */
export const SLOT_MAIN_BEAT = 0;
const BEAT_BYTES = BigInt64Array.BYTES_PER_ELEMENT;
const FENCE_WORDS = 5;
const TWO_32 = 2 ** 32;

export function slotBuffer(partitions: number): SharedArrayBuffer {
  return new SharedArrayBuffer(BEAT_BYTES + partitions * FENCE_WORDS * Uint32Array.BYTES_PER_ELEMENT);
}

/** The heartbeat slot's view. */
export function beatView(sab: SharedArrayBuffer): BigInt64Array {
  return new BigInt64Array(sab, 0, 1);
}

/** The partitions' fences' view (for storeFence and fenceHolds). */
export function fenceView(sab: SharedArrayBuffer): Uint32Array {
  return new Uint32Array(sab, BEAT_BYTES);
}

/** The lease thread's write (the only writer): an odd sequence while the words change. */
export function storeFence(fences: Uint32Array, partition: number, validUntil: number, token: number): void {
  const at = partition * FENCE_WORDS;
  Atomics.add(fences, at, 1);
  Atomics.store(fences, at + 1, Math.floor(validUntil / TWO_32));
  Atomics.store(fences, at + 2, validUntil >>> 0);
  Atomics.store(fences, at + 3, Math.floor(token / TWO_32));
  Atomics.store(fences, at + 4, token >>> 0);
  Atomics.add(fences, at, 1);
}

/**
 * The main thread's read: valid at `now`, and for the acquisition holding `token`. A read that overlaps a
 * write is read again; should writes keep overlapping, the fence says no (a retry, never a wrong yes).
 */
export function fenceHolds(fences: Uint32Array, partition: number, token: number, now: number): boolean {
  const at = partition * FENCE_WORDS;
  for (let attempt = 0; attempt < 8; attempt++) {
    const before = Atomics.load(fences, at);
    if ((before & 1) !== 0) continue;
    const until = Atomics.load(fences, at + 1) * TWO_32 + Atomics.load(fences, at + 2);
    const high = Atomics.load(fences, at + 3);
    const low = Atomics.load(fences, at + 4);
    if (Atomics.load(fences, at) !== before) continue;
    return now < until && high === Math.floor(token / TWO_32) && low === token >>> 0;
  }
  return false;
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

/** The same typed error on this side: a PipelineIoError keeps its code, so callers branch on it as before. */
export function fromWire(wire: WireError): Error {
  if (wire.name === 'PipelineIoError' && wire.code)
    return new PipelineIoError(wire.code as PipelineIoErrorCode, wire.message);
  const err = new Error(wire.message);
  err.name = wire.name;
  return err;
}
