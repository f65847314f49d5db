/**
 * A LaneHost on a thread of its own, for worker tests that need the thread to be able to die (not a test
 * file: compiled to dist/test/worker/lane-thread.js and started with `new Worker(...)`). `workerData` is
 * its WorkerInit, whose port comes in the transfer list.
 */
import { workerData } from 'node:worker_threads';
import type { WorkerInit } from '../../apps/worker/messages';
import serve from '../../apps/worker/worker';

void serve(workerData as WorkerInit);
