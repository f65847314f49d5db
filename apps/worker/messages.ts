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
  /** The node's InflightTable (see inflight-table.ts): the request ids each worker is computing. */
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
