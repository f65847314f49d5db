/**
 * This node's worker threads. Piscina only starts them: each runs one long-lived `serve` task (a LaneHost)
 * for the node's whole life, controlled over its own MessagePort — no task queue. Loads a slot's lane on every
 * thread, and replaces a thread that dies (reloading its lanes, reporting the requests it held so the node
 * can answer them).
 */

import * as path from 'node:path';
import { MessageChannel, type MessagePort } from 'node:worker_threads';
import type { Logger } from 'pino';
import { Piscina } from 'piscina';
import type { DeviceTarget } from '../../libs/config';
import { InflightTable } from '../worker/inflight-table';
import type { LoadCommand, WorkerCommand, WorkerEvent, WorkerInit } from '../worker/messages';

export interface PoolOptions {
  nodeIndex: number;
  workers: number;
  device: DeviceTarget;
  intraOpThreads: number;
  responseRing: SharedArrayBuffer;
  metrics: SharedArrayBuffer;
  logLevel: string;
  logger: Logger;
  /** Called after a worker died, with the request ids it had claimed and not answered. */
  onWorkerDeath: (workerIndex: number, claimedRequestIds: number[], ringOwnerId: number | undefined) => void;
}

export interface LaneLoadResult {
  executionProvider: string;
  fallbackReason?: string;
  loadMs: number;
}

interface WorkerHandle {
  index: number;
  port: MessagePort;
  generation: number;
  alive: boolean;
  restarts: number;
  ownerId: number | undefined;
  pending: Map<string, { resolve: (event: WorkerEvent) => void; reject: (error: Error) => void }>;
}

export class WorkerThreads {
  private readonly piscina: Piscina;
  private readonly handles: WorkerHandle[] = [];
  private readonly lanes = new Map<number, LoadCommand>();
  readonly inflight: SharedArrayBuffer;
  private stopping = false;
  private readonly tasks: Promise<unknown>[] = [];

  constructor(private readonly options: PoolOptions) {
    this.inflight = InflightTable.createBuffer(options.workers);
    this.piscina = new Piscina({
      filename: path.join(__dirname, '../worker/worker.js'),
      minThreads: options.workers,
      maxThreads: options.workers,
      // Worker tasks never finish while serving: keep threads (and their sessions) alive.
      idleTimeout: 2 ** 31 - 1,
      // The default parks idle threads in a blocking Atomics.wait, which would starve MessagePort and ring waits.
      atomics: 'disabled',
      concurrentTasksPerWorker: 1,
    });
    this.piscina.on('error', (error: Error) => options.logger.error({ err: error }, 'worker pool error'));
  }

  get size(): number {
    return this.options.workers;
  }

  workersAlive(): number {
    return this.handles.filter((handle) => handle.alive).length;
  }

  start(): void {
    for (let index = 0; index < this.options.workers; index++) this.spawn(index, 0);
  }

  private spawn(index: number, restarts: number): void {
    const channel = new MessageChannel();
    const previous = this.handles[index];
    const handle: WorkerHandle = {
      index,
      port: channel.port1,
      generation: (previous?.generation ?? -1) + 1,
      alive: true,
      restarts,
      ownerId: undefined,
      pending: new Map(),
    };
    this.handles[index] = handle;
    channel.port1.on('message', (event: WorkerEvent) => this.onEvent(handle, event));
    const init: WorkerInit = {
      nodeIndex: this.options.nodeIndex,
      workerIndex: index,
      port: channel.port2,
      responseRing: this.options.responseRing,
      metrics: this.options.metrics,
      metricsShard: 1 + index,
      inflight: this.inflight,
      device: this.options.device,
      intraOpThreads: this.options.intraOpThreads,
      logLevel: this.options.logLevel,
    };
    const task = this.piscina.run(init, { transferList: [channel.port2] as unknown as never[] });
    this.tasks.push(task.catch(() => undefined));
    task.then(
      () => {
        handle.alive = false;
      },
      (error: Error) => this.onDeath(handle, error),
    );
  }

  private onDeath(handle: WorkerHandle, error: Error): void {
    handle.alive = false;
    handle.port.close();
    for (const waiter of handle.pending.values())
      waiter.reject(new Error(`worker ${handle.index} died: ${error.message}`));
    handle.pending.clear();
    const claimed = this.claimedBy(handle.index);
    this.options.logger.error(
      { worker: handle.index, err: error.message, claimed: claimed.length },
      'worker died',
    );
    this.options.onWorkerDeath(handle.index, claimed, handle.ownerId);
    if (this.stopping) return;
    const delay = Math.min(5000, 100 * 2 ** Math.min(handle.restarts, 6));
    setTimeout(() => {
      if (this.stopping) return;
      this.spawn(handle.index, handle.restarts + 1);
      for (const lane of this.lanes.values()) {
        this.loadOn(this.handles[handle.index]!, lane).then(
          () =>
            this.options.logger.info(
              { worker: handle.index, model: lane.model, version: lane.version },
              'replacement worker loaded model',
            ),
          (loadError: Error) =>
            this.options.logger.error(
              { worker: handle.index, err: loadError.message },
              'replacement worker failed to load',
            ),
        );
      }
    }, delay).unref();
  }

  /** Request ids a dead worker had claimed; its table is cleared so a replacement starts clean. */
  private claimedBy(workerIndex: number): number[] {
    return new InflightTable(this.inflight, workerIndex).takeAll();
  }

  private onEvent(handle: WorkerHandle, event: WorkerEvent): void {
    switch (event.type) {
      case 'hello':
        handle.ownerId = event.ownerId;
        return;
      case 'log':
        this.options.logger[event.level]({ worker: handle.index, ...event.data }, event.msg);
        return;
      case 'loaded':
      case 'load-failed':
        this.settle(handle, `load:${event.slot}`, event);
        return;
      case 'unloaded':
        this.settle(handle, `unload:${event.slot}`, event);
        return;
      case 'rebatched':
        this.settle(handle, `rebatch:${event.slot}`, event);
        return;
      case 'drained':
        this.settle(handle, 'drain', event);
        return;
    }
  }

  private settle(handle: WorkerHandle, key: string, event: WorkerEvent): void {
    const waiter = handle.pending.get(key);
    if (!waiter) return;
    handle.pending.delete(key);
    waiter.resolve(event);
  }

  private request(handle: WorkerHandle, key: string, command: WorkerCommand): Promise<WorkerEvent> {
    return new Promise<WorkerEvent>((resolve, reject) => {
      if (!handle.alive) {
        reject(new Error(`worker ${handle.index} is not running`));
        return;
      }
      handle.pending.set(key, { resolve, reject });
      handle.port.postMessage(command);
    });
  }

  private async loadOn(handle: WorkerHandle, command: LoadCommand): Promise<LaneLoadResult> {
    const event = await this.request(handle, `load:${command.slot}`, command);
    if (event.type === 'load-failed') throw new Error(event.error);
    if (event.type !== 'loaded') throw new Error(`unexpected answer ${event.type}`);
    const result: LaneLoadResult = { executionProvider: event.executionProvider, loadMs: event.loadMs };
    if (event.fallbackReason) result.fallbackReason = event.fallbackReason;
    return result;
  }

  /** Loads one model version on every worker; fails (and unloads it everywhere) if any worker cannot. */
  async loadLane(command: LoadCommand): Promise<LaneLoadResult> {
    const results = await Promise.allSettled(this.handles.map((handle) => this.loadOn(handle, command)));
    const failed = results.find((result) => result.status === 'rejected');
    if (failed) {
      await this.unloadLane(command.slot).catch(() => undefined);
      throw (failed as PromiseRejectedResult).reason;
    }
    this.lanes.set(command.slot, command);
    return (results[0] as PromiseFulfilledResult<LaneLoadResult>).value;
  }

  async unloadLane(slot: number): Promise<void> {
    this.lanes.delete(slot);
    await Promise.allSettled(
      this.handles
        .filter((h) => h.alive)
        .map((handle) => this.request(handle, `unload:${slot}`, { type: 'unload', slot })),
    );
  }

  /** New batch options for a loaded lane on every worker (and for replacement workers from now on). */
  async rebatchLane(slot: number, batching: LoadCommand['batching']): Promise<void> {
    const lane = this.lanes.get(slot);
    if (!lane) return;
    this.lanes.set(slot, { ...lane, batching });
    await Promise.all(
      this.handles
        .filter((h) => h.alive)
        .map((handle) => this.request(handle, `rebatch:${slot}`, { type: 'rebatch', slot, batching })),
    );
  }

  /** Test hook: the worker dies inside the next batch it runs (see the worker's 'crash' command). */
  crashWorker(workerIndex: number): boolean {
    const handle = this.handles[workerIndex];
    if (!handle?.alive) return false;
    handle.port.postMessage({
      type: 'crash',
      reason: 'requested through the test hook',
    } satisfies WorkerCommand);
    return true;
  }

  /** Lets every worker finish what it holds, then stops the pool. */
  async drain(): Promise<void> {
    this.stopping = true;
    await Promise.allSettled(
      this.handles.filter((h) => h.alive).map((handle) => this.request(handle, 'drain', { type: 'drain' })),
    );
    await Promise.allSettled(this.tasks);
    await this.piscina.destroy();
  }
}
