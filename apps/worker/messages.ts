import type { MessagePort } from 'node:worker_threads';
import type { BatchPolicyOptions } from '../../libs/batching';
import type { DeviceTarget } from '../../libs/config';
import type { ModelSignature } from '../../libs/protocol';

/** What a node hands each long-lived worker task. */
export interface WorkerInit {
  nodeIndex: number;
  workerIndex: number;
  port: MessagePort;
  responseRing: SharedArrayBuffer;
  metrics: SharedArrayBuffer;
  metricsShard: number;
  /** Int32Array regions listing the request ids this worker is computing, read by the node if the worker dies. */
  inflight: SharedArrayBuffer;
  device: DeviceTarget;
  intraOpThreads: number;
  logLevel: string;
}

export interface LoadCommand {
  type: 'load';
  slot: number;
  model: string;
  version: string;
  file: string;
  signature: ModelSignature;
  /** Request rings by priority code (0 low, 1 normal, 2 high). */
  rings: SharedArrayBuffer[];
  doorbell: SharedArrayBuffer;
  batching: BatchPolicyOptions;
}

export type WorkerCommand =
  | LoadCommand
  | { type: 'unload'; slot: number }
  /** New batch options for a loaded lane (a configuration reload); applied from its next batch on. */
  | { type: 'rebatch'; slot: number; batching: BatchPolicyOptions }
  | { type: 'drain' }
  | { type: 'crash'; reason: string };

export type WorkerEvent =
  | { type: 'hello'; workerIndex: number; ownerId: number }
  | {
      type: 'loaded';
      slot: number;
      workerIndex: number;
      executionProvider: string;
      fallbackReason?: string;
      loadMs: number;
    }
  | { type: 'load-failed'; slot: number; workerIndex: number; error: string }
  | { type: 'unloaded'; slot: number; workerIndex: number }
  | { type: 'rebatched'; slot: number; workerIndex: number }
  | { type: 'drained'; workerIndex: number }
  | { type: 'log'; level: 'info' | 'warn' | 'error'; msg: string; data?: Record<string, unknown> };

/** Batches a worker may have running at once (the next one is prepared while one runs). */
export const MAX_BATCHES_IN_FLIGHT = 2;
export const MAX_BATCH_ITEMS = 4096;
/** Int32 cells per worker in the in-flight table: per batch slot, a count then ids. */
export const INFLIGHT_REGION_CELLS = 1 + MAX_BATCH_ITEMS;
export const INFLIGHT_CELLS_PER_WORKER = MAX_BATCHES_IN_FLIGHT * INFLIGHT_REGION_CELLS;
