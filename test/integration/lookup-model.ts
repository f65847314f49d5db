/**
 * `lookup`: a test model with a data-dependent failure (not shipped in models/). Each request carries 4 int64
 * ids; the model gathers their rows of a small embedding table. An id outside [-ROWS, ROWS) makes ONNX Runtime
 * fail the whole run it is in ("indices element out of data bounds"), as any Gather, Slice or Reshape fed a
 * user value does.
 */
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { type ModelConfig, serializeConfig } from '../../scripts/models/config';
import { encodeModel, floatInitializer, model, node } from '../../scripts/models/onnx-builder';
import { valueInfo } from '../../scripts/models/types';

export const LOOKUP_ROWS = 8;
export const LOOKUP_WIDTH = 2;
export const LOOKUP_IDS = 4;
/** An id no table row has: the run that carries it fails. */
export const POISON_ID = 1000;

/** The table's value at (row, column): exact in float32. */
export function lookupValue(row: number, column: number): number {
  return row * 10 + column + 0.5;
}

/** What `lookup` answers for `ids` (all in range; negative ids count from the end, as Gather does). */
export function expectedVectors(ids: readonly number[]): number[] {
  const out: number[] = [];
  for (const id of ids) {
    const row = id < 0 ? id + LOOKUP_ROWS : id;
    for (let column = 0; column < LOOKUP_WIDTH; column++) out.push(lookupValue(row, column));
  }
  return out;
}

export function lookupConfig(batching: ModelConfig['batching']): ModelConfig {
  return {
    name: 'lookup',
    description:
      'Embedding lookup: Gather rows of an 8×2 table by 4 int64 ids (an id out of range fails the run)',
    inputs: [{ name: 'ids', dtype: 'int64', shape: [LOOKUP_IDS] }],
    outputs: [{ name: 'vectors', dtype: 'float32', shape: [LOOKUP_IDS, LOOKUP_WIDTH] }],
    ...(batching ? { batching } : {}),
    default_version: '1',
  };
}

export function lookupModelBytes(): Uint8Array {
  const config = lookupConfig(undefined);
  const table: number[] = [];
  for (let row = 0; row < LOOKUP_ROWS; row++)
    for (let column = 0; column < LOOKUP_WIDTH; column++) table.push(lookupValue(row, column));
  return encodeModel(
    model({
      docString: config.description,
      graph: {
        name: 'lookup',
        inputs: [valueInfo(config.inputs[0]!)],
        outputs: [valueInfo(config.outputs[0]!)],
        initializers: [floatInitializer('table', [LOOKUP_ROWS, LOOKUP_WIDTH], table)],
        nodes: [node('Gather', ['table', 'ids'], ['vectors'], { axis: 0 })],
      },
    }),
  );
}

/** Writes `lookup` v1 into the model repository `dir`; returns the model file. */
export function writeLookupModel(dir: string, batching: ModelConfig['batching']): string {
  mkdirSync(path.join(dir, 'lookup', '1'), { recursive: true });
  writeFileSync(path.join(dir, 'lookup', 'config.json'), serializeConfig(lookupConfig(batching)));
  const file = path.join(dir, 'lookup', '1', 'model.onnx');
  writeFileSync(file, lookupModelBytes());
  return file;
}

/** A model repository holding only `lookup` v1; returns its directory and the model file. */
export function lookupRepository(batching: ModelConfig['batching']): { dir: string; file: string } {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'streaminfer-lookup-'));
  return { dir, file: writeLookupModel(dir, batching) };
}
