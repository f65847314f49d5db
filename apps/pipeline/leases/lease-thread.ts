/**
 * The lease thread (worker_threads entry, started by LeaseKeeper): PartitionLeases on a NATS connection of
 * its own, so renewals go on while the main thread is blocked (a checkpoint restore, a large snapshot, a
 * starved CPU). Acquire and release go to the main thread and are awaited; each lease's fence is published
 * in the shared slots. Renewals pause once the main thread's heartbeat is older than maxStallMs: a wedged
 * process must still lose its partitions.
 */
import { parentPort, workerData } from 'node:worker_threads';
import pino from 'pino';
import { connectNats, type NatsHandle } from '../connection';
import type { ReleaseReason } from './lease-types';
import {
  beatView,
  type FromThread,
  fenceView,
  fromWire,
  SLOT_MAIN_BEAT,
  storeFence,
  type ThreadInit,
  type ToThread,
  toWire,
} from './lease-wire';
import { PartitionLeases } from './leases';

const init = workerData as ThreadInit;
const port = parentPort!;
const slots = beatView(init.slots);
const fences = fenceView(init.slots);
// pino writes to fd 1 itself: these lines come out even while the main thread is blocked.
const logger = pino({
  level: init.logLevel,
  base: { pid: process.pid, ...init.logBindings, thread: 'leases' },
});
const waiting = new Map<number, { resolve: () => void; reject: (err: Error) => void }>();
let asked = 0;
let stalled = false;
let nats: NatsHandle | undefined;
let leases: PartitionLeases | undefined;

function post(message: FromThread): void {
  port.postMessage(message);
}

/** Asks the main thread to run a handler; renewals go on here until it answers. */
function ask(
  message:
    | { type: 'acquire'; partition: number; token: number }
    | { type: 'release'; partition: number; reason: ReleaseReason; token: number },
): Promise<void> {
  const id = ++asked;
  return new Promise<void>((resolve, reject) => {
    waiting.set(id, { resolve, reject });
    post({ ...message, id });
  });
}

function mainAlive(): boolean {
  const beatAge = Date.now() - Number(Atomics.load(slots, SLOT_MAIN_BEAT));
  const nowStalled = beatAge > init.maxStallMs;
  if (nowStalled !== stalled) {
    stalled = nowStalled;
    if (stalled)
      logger.warn(
        { beatAgeMs: beatAge, maxStallMs: init.maxStallMs, owned: leases?.owned() },
        'main thread stalled past maxStallMs: lease renewals paused, the leases will lapse',
      );
    else logger.warn({ owned: leases?.owned() }, 'main thread responsive again: lease renewals resumed');
  }
  return !stalled;
}

async function open(): Promise<void> {
  try {
    nats = await connectNats({
      auth: init.auth,
      name: init.connectionName,
      replicas: init.replicas,
      onProblem: (message) => logger.error({ servers: init.auth.shown }, message),
    });
    leases = await PartitionLeases.open({
      nats,
      bucket: init.bucket,
      group: init.group,
      instanceId: init.instanceId,
      partitions: init.partitions,
      ttlMs: init.ttlMs,
      reclaim: init.reclaim,
      expiry: init.expiry,
      logger,
      mayRenew: mainAlive,
      onValidity: (partition, until, token) => storeFence(fences, partition, until, token),
    });
  } catch (err) {
    await nats?.close().catch(() => undefined);
    // The main thread ends this thread on this message.
    post({ type: 'failed', error: toWire(err) });
    return;
  }
  leases.onChange = (change) => post({ type: 'change', change });
  leases.onLive = (live) => post({ type: 'live', live });
  post({ type: 'opened', expiry: leases.expiry });
}

async function stop(): Promise<void> {
  await leases?.stop().catch((err: unknown) => logger.warn({ err }, 'lease stop failed'));
  await nats?.close().catch(() => undefined);
  // The main thread ends this thread on this message.
  post({ type: 'stopped' });
}

port.on('message', (message: ToThread) => {
  switch (message.type) {
    case 'answer': {
      const w = waiting.get(message.id);
      waiting.delete(message.id);
      if (message.error) w?.reject(fromWire(message.error));
      else w?.resolve();
      break;
    }
    case 'start':
      leases?.start({
        acquire: (partition, token) => ask({ type: 'acquire', partition, token }),
        release: (partition, reason, token) => ask({ type: 'release', partition, reason, token }),
      });
      break;
    case 'peers':
      if (!leases) break;
      leases.peers().then(
        (peers) => post({ type: 'peers', id: message.id, peers }),
        (err: unknown) => post({ type: 'peers', id: message.id, error: toWire(err) }),
      );
      break;
    case 'stop':
      void stop();
      break;
  }
});

void open();
