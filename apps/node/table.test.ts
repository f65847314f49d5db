import * as path from 'node:path';
import pino from 'pino';
import { metricsBufferFor } from '../../libs/metrics';
import type { TablePlan } from '../../libs/registry';
import type { NodeStartOptions } from './ipc';
import { ModelTable } from './table';
import type { WorkerThreads } from './worker-threads';

const MODELS_DIR = path.resolve(__dirname, '../../../models');

/** Workers that load and unload instantly, recording which slots hold a lane. */
function fakePool(): { pool: WorkerThreads; lanes: Set<number> } {
  const lanes = new Set<number>();
  const pool = {
    size: 1,
    loadLane: async (command: { slot: number }) => {
      lanes.add(command.slot);
      return { executionProvider: 'cpu', loadMs: 0 };
    },
    unloadLane: async (slot: number) => {
      lanes.delete(slot);
    },
  } as unknown as WorkerThreads;
  return { pool, lanes };
}

function newTable(): { table: ModelTable; lanes: Set<number> } {
  const { pool, lanes } = fakePool();
  const options = {
    modelsDir: MODELS_DIR,
    defaultModel: 'digits',
    backpressure: { rateLimitRps: 0, rateLimitBurst: 0, maxInflightPerClient: 64, maxModelQueue: 256 },
    ringBytes: 64 * 1024,
    batch: {
      policy: 'adaptive',
      maxBatchSize: 8,
      maxQueueDelayMs: 2,
      explicitSize: false,
      explicitTimeout: false,
      explicitPolicy: false,
    },
  } as unknown as NodeStartOptions;
  const table = new ModelTable(options, pool, metricsBufferFor(2), pino({ level: 'silent' }));
  return { table, lanes };
}

/** What the gateway's router can reach: a model by name, a version of it. */
function routable(table: ModelTable, model: string, version?: string): boolean {
  const runtime = table.models.get(model);
  return runtime !== undefined && (version === undefined || runtime.versions.has(version));
}

const start: TablePlan = {
  defaultModel: 'digits',
  models: [{ name: 'digits', versions: ['1'], stable: '1' }],
};
const next: TablePlan = {
  defaultModel: 'digits',
  models: [
    { name: 'digits', versions: ['1', '2'], stable: '2', previousStable: '1' },
    { name: 'upper', versions: ['1'], stable: '1' },
  ],
};

describe('ModelTable: nothing a prepare loads is routable before the commit', () => {
  test('a prepared version and a prepared new model are loaded but unroutable; commit attaches both', async () => {
    const { table, lanes } = newTable();
    await table.loadPlan(start, 0);
    expect(lanes.size).toBe(1);

    expect(await table.prepare(next)).toBe(2);
    expect(lanes.size).toBe(3);
    expect(routable(table, 'digits', '2')).toBe(false);
    expect(routable(table, 'upper')).toBe(false);
    expect(table.models.get('digits')!.stable).toBe('1');

    table.commit(next, 1);
    expect(routable(table, 'digits', '2')).toBe(true);
    expect(routable(table, 'upper', '1')).toBe(true);
    expect(table.models.get('digits')!.stable).toBe('2');
    expect(table.epoch).toBe(1);
  });

  test('abort unloads what was prepared and routing never saw it', async () => {
    const { table, lanes } = newTable();
    await table.loadPlan(start, 0);
    await table.prepare(next);
    await table.abort();
    expect(lanes.size).toBe(1);
    expect([...table.models.keys()]).toEqual(['digits']);
    expect([...table.models.get('digits')!.versions.keys()]).toEqual(['1']);
  });

  test('a commit naming a model that is neither loaded nor prepared changes nothing', async () => {
    const { table } = newTable();
    await table.loadPlan(start, 0);
    await table.prepare(next);
    const bad: TablePlan = {
      ...next,
      models: [...next.models, { name: 'echo', versions: ['1'], stable: '1' }],
    };
    expect(() => table.commit(bad, 1)).toThrow(/echo/);
    expect(routable(table, 'digits', '2')).toBe(false);
    expect(routable(table, 'upper')).toBe(false);
    expect(table.epoch).toBe(0);
    // The prepared versions are still there for the right commit.
    table.commit(next, 1);
    expect(routable(table, 'upper', '1')).toBe(true);
  });

  test('a prepare left without commit or abort is dropped by the next prepare', async () => {
    const { table, lanes } = newTable();
    await table.loadPlan(start, 0);
    await table.prepare(next);
    await table.prepare(next);
    expect(lanes.size).toBe(3);
  });

  test('syncTo moves an idle table to a plan: releases first, loads the rest, commits', async () => {
    const { table, lanes } = newTable();
    await table.loadPlan(next, 0);
    const target: TablePlan = {
      defaultModel: 'digits',
      models: [{ name: 'digits', versions: ['2'], stable: '2' }],
    };
    await table.syncTo(target, 4);
    expect([...table.models.keys()]).toEqual(['digits']);
    expect([...table.models.get('digits')!.versions.keys()]).toEqual(['2']);
    expect(lanes.size).toBe(1);
    expect(table.epoch).toBe(4);
  });
});
