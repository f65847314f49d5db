/**
 * FleetMember against the registry record it follows, with fakes for NATS: a record
 * naming a version no host has, a record that went back below the host (a lost bucket, a re-founded fleet), a
 * COMMIT below the host's epoch, and a record that cannot be read.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import pino from 'pino';
import { Registry } from 'prom-client';
import { ProtocolError } from '../../../libs/protocol';
import type { TablePlan } from '../../../libs/registry';
import { type NodeChannel, ReloadCoordinator, type StepAnswer } from '../coordinator';
import {
  type CoordinatorLease,
  type FleetConnection,
  FleetError,
  type FleetRecord,
  type FleetTable,
  fleetNames,
  type HostBoard,
  type HostStepClient,
  type ModelArtifacts,
  type RegistryStore,
} from './';
import { FleetMember } from './fleet-member';

const table = (stable: string, versions = ['1', '2']): FleetTable => ({
  defaultModel: 'digits',
  models: [{ name: 'digits', versions, stable }],
});

/** A record of which this host ('a') is already a member (format 2): no join write precedes what a test checks. */
function record(epoch: number, t: FleetTable, reloadId = `r${epoch}`): FleetRecord {
  return {
    format: 2,
    members: ['a'],
    epoch,
    table: t,
    reloadId,
    reason: 'test',
    strategy: 'atomic',
    committedBy: 'other',
    committedAt: '2026-12-01T00:00:00.000Z',
  };
}

const ok: StepAnswer = { ok: true };
const node: NodeChannel = {
  index: 0,
  prepare: async () => ok,
  commit: async () => ok,
  abort: async () => ok,
  release: async () => ok,
  roll: async () => ok,
  restart: async () => ok,
};

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'streaminfer-member-'));
  // Versions 1 and 2 are on this host; nothing is pushed to the fleet store.
  for (const version of ['1', '2']) {
    mkdirSync(path.join(dir, 'digits', version), { recursive: true });
    writeFileSync(path.join(dir, 'digits', version, 'model.onnx'), 'onnx');
  }
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** One member on fakes: `entry` is the KV key (garbage: a value that does not parse). */
function setup(options: {
  epoch: number;
  served: FleetTable;
  entry: { record: FleetRecord | 'garbage'; revision: number };
}) {
  let entry = options.entry;
  const commits: Array<{ record: FleetRecord; expected: number }> = [];
  let onRecord: ((record: FleetRecord, revision: number) => void) | undefined;
  const store = {
    read: async () => {
      if (entry.record === 'garbage')
        throw new FleetError('invalid_record', 'registry record: not JSON', { revision: entry.revision });
      return { record: entry.record, revision: entry.revision };
    },
    commit: async (written: FleetRecord, expected: number) => {
      if (expected !== entry.revision) throw new FleetError('conflict', 'moved');
      commits.push({ record: written, expected });
      entry = { record: written, revision: expected + 1 };
      const revision = entry.revision;
      setImmediate(() => onRecord?.(written, revision));
      return revision;
    },
    watch: (callback: (record: FleetRecord, revision: number) => void) => {
      onRecord = callback;
      if (entry.record !== 'garbage') {
        const { record: current, revision } = entry;
        setImmediate(() => callback(current as FleetRecord, revision));
      }
      return { stop: () => undefined };
    },
  } as unknown as RegistryStore;
  const connection = {
    available: true,
    hostId: 'a',
    names: fleetNames('unit'),
    nc: { subscribe: () => ({ unsubscribe: () => undefined }) },
    onAvailability: () => () => undefined,
    close: async () => undefined,
  } as unknown as FleetConnection;
  const board = {
    start: () => undefined,
    stop: () => undefined,
    remove: async () => undefined,
    list: async () => [],
  } as unknown as HostBoard;
  const lease = {
    acquire: async () => ({ held: true }),
    release: async () => undefined,
    current: async () => undefined,
  } as unknown as CoordinatorLease;
  const artifacts = {
    fetchInto: async () => {
      throw new FleetError('artifact_missing', 'not pushed');
    },
    digest: async () => undefined,
  } as unknown as ModelArtifacts;
  const coordinator = new ReloadCoordinator(options.served as TablePlan, {
    nodes: () => [node],
    now: () => 0,
  });
  coordinator.epoch = options.epoch;
  const fences: Array<string | null> = [];
  const registry = new Registry();
  const member = new FleetMember({
    fleet: 'unit',
    hostId: 'a',
    address: 'http://127.0.0.1:1',
    modelsDir: dir,
    connection,
    store,
    board,
    lease,
    steps: { call: async () => ok } as HostStepClient,
    artifacts,
    host: {
      coordinator: () => coordinator,
      hostPlan: (t) => t as TablePlan,
      fence: (reason) => fences.push(reason),
      load: () => ({ nodes: 1, nodesReady: 1, requestsPerSecond: 0 }),
    },
    logger: pino({ level: 'silent' }),
    registry,
  });
  const gauge = async (name: string) =>
    ((await registry.getSingleMetric(name)?.get())?.values[0]?.value as number | undefined) ?? undefined;
  return { member, coordinator, commits, fences, gauge, entry: () => entry };
}

async function until(check: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 2000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

const members: FleetMember[] = [];
afterEach(async () => {
  for (const member of members.splice(0)) await member.close();
});

describe('a record naming a version no host has (point 1)', () => {
  test('a host that lags it keeps serving its last committed table, degraded, never fenced', async () => {
    const f = setup({
      epoch: 3,
      served: table('1'),
      entry: { record: record(4, table('9', ['1', '9'])), revision: 10 },
    });
    members.push(f.member);
    await f.member.start();
    await until(() => f.member.behind !== undefined, 'the host says it is behind');
    expect(f.member.behind).toContain('cannot reach fleet epoch 4');
    expect(f.member.behind).toContain('version 9 of model digits');
    expect(f.member.fenced).toBeUndefined();
    expect(f.fences).toEqual([]);
    expect(f.coordinator.epoch).toBe(3);
    expect(f.coordinator.table.models[0]!.stable).toBe('1');
    expect(await f.gauge('streaminfer_fleet_behind')).toBe(1);
    expect(await f.gauge('streaminfer_fleet_fenced')).toBe(0);
  });

  test('a record naming a version neither here nor pushed is never written (rolling writes first)', async () => {
    const f = setup({ epoch: 4, served: table('1'), entry: { record: record(4, table('1')), revision: 10 } });
    members.push(f.member);
    const outcome = await f.member.change(() => table('9', ['1', '9']), {
      strategy: 'rolling',
      reason: 'stable 9',
    });
    expect(outcome.result).toBe('failed');
    expect(outcome.error).toContain('version 9 of model digits is neither in');
    expect(f.commits).toEqual([]);
  });
});

describe('a host ahead of the record (point 2)', () => {
  test('a record that went back below the host is raised to max(known epochs) + 1; the host converges to it', async () => {
    // The bucket was lost and another host re-founded the fleet at epoch 0 with its table.
    const f = setup({
      epoch: 2,
      served: table('1'),
      entry: { record: record(0, table('2'), 'founded'), revision: 1 },
    });
    members.push(f.member);
    await f.member.start();
    await until(() => f.coordinator.epoch === 3, 'the host converges to the raised record');
    expect(f.commits).toHaveLength(1);
    expect(f.commits[0]).toMatchObject({
      expected: 1,
      record: { epoch: 3, table: table('2'), committedBy: 'a' },
    });
    expect(f.coordinator.table.models[0]!.stable).toBe('2');
    expect(f.member.fenced).toBeUndefined();
    expect(f.member.behind).toBeUndefined();
  });

  test('a COMMIT below the host’s epoch settles what it held: the next PREPARE is taken, not "in progress"', async () => {
    const f = setup({ epoch: 2, served: table('1'), entry: { record: record(2, table('1')), revision: 5 } });
    members.push(f.member);
    expect(await f.member.step({ step: 'prepare', reloadId: 'x', plan: table('2') })).toMatchObject({
      ok: true,
    });
    const committed = await f.member.step({ step: 'commit', reloadId: 'x', plan: table('2'), epoch: 1 });
    expect(committed).toMatchObject({ ok: false });
    expect(committed.error).toContain('not above');
    expect(f.coordinator.busy).toBe(false);
    expect(await f.member.step({ step: 'prepare', reloadId: 'y', plan: table('2') })).toMatchObject({
      ok: true,
    });
    expect(await f.member.step({ step: 'commit', reloadId: 'y', plan: table('2'), epoch: 3 })).toMatchObject({
      ok: true,
    });
    expect(f.coordinator.epoch).toBe(3);
  });
});

describe('a record that cannot be read (point 4)', () => {
  test('a change answers 503 invalid_record, not 400 bad_request', async () => {
    const f = setup({ epoch: 2, served: table('1'), entry: { record: 'garbage', revision: 7 } });
    members.push(f.member);
    const refused = await f.member
      .change(() => table('2'), { strategy: 'atomic', reason: 'promote' })
      .catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(ProtocolError);
    expect((refused as ProtocolError).code).toBe('invalid_record');
    expect((refused as ProtocolError).httpStatus).toBe(503);
    expect((refused as ProtocolError).message).toContain('POST /api/reload {}');
    await expect(f.member.view()).rejects.toMatchObject({ code: 'invalid_record' });
    expect(f.commits).toEqual([]);
  });

  test('the repair (a repository reload) replaces it by CAS from this host’s table, above its epoch', async () => {
    const f = setup({ epoch: 2, served: table('1'), entry: { record: 'garbage', revision: 7 } });
    members.push(f.member);
    const outcome = await f.member.change((t) => t, { strategy: 'atomic', reason: 'reload', repair: true });
    expect(outcome).toMatchObject({ result: 'committed', epoch: 3 });
    expect(f.commits).toHaveLength(1);
    expect(f.commits[0]).toMatchObject({ expected: 7, record: { epoch: 3, table: table('1') } });
    expect(f.coordinator.epoch).toBe(3);
  });
});
