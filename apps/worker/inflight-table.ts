/**
 * The in-flight table: for each worker and each of its batch regions, the ring request ids that worker is
 * computing. The worker writes a region before its batch runs and clears it after; the node reads (and
 * empties) a dead worker's regions to answer those requests. One Int32 layout for both sides, per region:
 * a count, then the ids.
 */

/** Batches a worker may have running at once (the next one is prepared while one runs). */
export const MAX_BATCHES_IN_FLIGHT = 2;
export const MAX_BATCH_ITEMS = 4096;
const REGION_CELLS = 1 + MAX_BATCH_ITEMS;
const CELLS_PER_WORKER = MAX_BATCHES_IN_FLIGHT * REGION_CELLS;

export class InflightTable {
  private readonly cells: Int32Array;

  /** The shared memory of a node's table, for `workers` workers. */
  static createBuffer(workers: number): SharedArrayBuffer {
    return new SharedArrayBuffer(workers * CELLS_PER_WORKER * 4);
  }

  /** One worker's part of the table. */
  constructor(buffer: SharedArrayBuffer, workerIndex: number) {
    this.cells = new Int32Array(buffer, workerIndex * CELLS_PER_WORKER * 4, CELLS_PER_WORKER);
  }

  /** Worker: the batch in `region` holds these ids (the count is stored last, so a reader never sees a partial list). */
  publish(region: number, requestIds: ArrayLike<number>, count: number): void {
    const base = region * REGION_CELLS;
    for (let i = 0; i < count; i++) this.cells[base + 1 + i] = requestIds[i]! | 0;
    Atomics.store(this.cells, base, count);
  }

  /** Worker: the batch in `region` is answered. */
  clear(region: number): void {
    Atomics.store(this.cells, region * REGION_CELLS, 0);
  }

  /** Node, after the worker died: every id it held, and the table emptied so a replacement starts clean. */
  takeAll(): number[] {
    const ids: number[] = [];
    for (let region = 0; region < MAX_BATCHES_IN_FLIGHT; region++) {
      const base = region * REGION_CELLS;
      const count = Atomics.load(this.cells, base);
      for (let i = 0; i < count; i++) ids.push(this.cells[base + 1 + i]! >>> 0);
      Atomics.store(this.cells, base, 0);
    }
    return ids;
  }
}
