/**
 * `replicas` (fleet: --cluster-replicas; pipeline: pipeline.json `replicas`): every stream, KV bucket and
 * object store the fleet and the pipeline create gets that many copies on a 3-node JetStream cluster; a count
 * the server cannot hold is refused with a message that says why (a lone server at connect; more replicas
 * than the cluster's servers at create); an existing one with fewer copies than asked is refused, not used.
 * The cluster runs on loopback (the kit's `isolation: 'loopback'`: no partitions needed here).
 */
import { Kvm } from '@nats-io/kv';
import pino from 'pino';
import { connectNats, PipelineIoError, provisionStreams, streamLayout } from '../../apps/pipeline';
import { CheckpointStore } from '../../apps/pipeline/io/checkpoints';
import { PartitionLeases } from '../../apps/pipeline/leases/leases';
import { connectFleet, FleetError, ModelArtifacts, RegistryStore } from '../../apps/supervisor/fleet';
import { TEST_NATS_URL } from './broker-kit';
import { type NatsCluster, startNatsCluster } from './nats-cluster-kit';

jest.setTimeout(120_000);

// The shared broker: one server, not clustered (the current release; 2.9 in the compatibility run).
const LONE_NATS = TEST_NATS_URL;

let cluster: NatsCluster;

beforeAll(async () => {
  cluster = await startNatsCluster({ isolation: 'loopback' });
});

afterAll(async () => {
  await cluster?.destroy();
});

async function refusal(op: () => Promise<unknown>): Promise<Error> {
  try {
    await op();
  } catch (err) {
    return err as Error;
  }
  throw new Error('accepted');
}

test('fleet: replicas 3 on the cluster gives the registry bucket and the model store 3 copies', async () => {
  const conn = await connectFleet({ servers: cluster.urls, fleet: 'rep3', hostId: 'h0', replicas: 3 });
  try {
    await RegistryStore.open(conn);
    await ModelArtifacts.open(conn);
    for (const stream of ['KV_streaminfer_fleet_rep3', 'OBJ_streaminfer_models_rep3']) {
      const info = await conn.jsm.streams.info(stream);
      expect(info.config.num_replicas).toBe(3);
      expect(info.cluster?.replicas?.length).toBe(2);
    }
  } finally {
    await conn.close();
  }
});

test('fleet: replicas > 1 on a lone server is refused at connect; more than the cluster holds at create', async () => {
  const lone = await refusal(() =>
    connectFleet({ servers: LONE_NATS, fleet: 'rep', hostId: 'h0', replicas: 3 }),
  );
  expect(lone).toBeInstanceOf(FleetError);
  expect((lone as FleetError).code).toBe('invalid_options');
  expect(lone.message).toMatch(/replicas 3 needs a JetStream cluster of at least 3 servers.*not clustered/);

  const outOfRange = await refusal(() =>
    connectFleet({ servers: cluster.urls, fleet: 'rep', hostId: 'h0', replicas: 6 }),
  );
  expect(outOfRange.message).toMatch(/replicas must be an integer from 1 to 5/);

  const conn = await connectFleet({ servers: cluster.urls, fleet: 'rep5', hostId: 'h0', replicas: 5 });
  try {
    const tooMany = await refusal(() => RegistryStore.open(conn));
    expect((tooMany as FleetError).code).toBe('invalid_options');
    expect(tooMany.message).toMatch(
      /bucket streaminfer_fleet_rep5: replicas 5 refused.*fewer than 5 servers/,
    );
  } finally {
    await conn.close();
  }
});

test('fleet: an existing R1 bucket is refused when 3 are asked, with the command that scales it', async () => {
  const one = await connectFleet({ servers: cluster.urls, fleet: 'grow', hostId: 'h0' });
  await RegistryStore.open(one);
  await one.close();
  const three = await connectFleet({ servers: cluster.urls, fleet: 'grow', hostId: 'h0', replicas: 3 });
  try {
    const short = await refusal(() => RegistryStore.open(three));
    expect(short.message).toMatch(
      /bucket streaminfer_fleet_grow exists with 1 replica\(s\), 3 asked: .*nats stream edit KV_streaminfer_fleet_grow --replicas 3/,
    );
  } finally {
    await three.close();
  }
});

test('pipeline: streams, lease bucket and checkpoint stores get replicas 3; a lone server is refused at connect', async () => {
  const lone = await refusal(() => connectNats({ servers: LONE_NATS, replicas: 3 }));
  expect(lone).toBeInstanceOf(PipelineIoError);
  expect(lone.message).toMatch(/not clustered/);

  const nats = await connectNats({ servers: cluster.urls, replicas: 3 });
  try {
    const layout = streamLayout({ subjectRoot: 'rep', eventsStream: 'REP_EVENTS' });
    await provisionStreams(nats.jsm, [layout.events], nats.replicas);
    expect((await nats.jsm.streams.info('REP_EVENTS')).config.num_replicas).toBe(3);
    const leases = await PartitionLeases.open({
      nats,
      bucket: 'rep_leases',
      group: 'g',
      instanceId: 'i0',
      partitions: 1,
      ttlMs: 5000,
      logger: pino({ level: 'silent' }),
    });
    await leases.stop();
    await CheckpointStore.open(nats.js, 'rep_checkpoints', 'g', 'p0', nats.replicas);
    for (const stream of ['KV_rep_leases', 'OBJ_rep_checkpoints', 'KV_rep_checkpoints_head'])
      expect((await nats.jsm.streams.info(stream)).config.num_replicas).toBe(3);

    // An R1 stream someone else made is refused, not run on with fewer copies than asked.
    await new Kvm(nats.js).create('rep_r1', { replicas: 1 });
    await nats.jsm.streams.add({ name: 'REP_R1', subjects: ['rep1.>'], num_replicas: 1 });
    const short = await refusal(() =>
      provisionStreams(nats.jsm, [{ ...layout.events, name: 'REP_R1', subjects: ['rep1.>'] }], 3),
    );
    expect((short as PipelineIoError).code).toBe('stream_mismatch');
    expect(short.message).toMatch(/stream REP_R1 exists with 1 replica\(s\), 3 asked/);

    const tooMany = await refusal(() =>
      provisionStreams(nats.jsm, [{ ...layout.events, name: 'REP_R5', subjects: ['rep5.>'] }], 5),
    );
    expect((tooMany as PipelineIoError).code).toBe('invalid_options');
    expect(tooMany.message).toMatch(/replicas 5 refused.*fewer than 5 servers/);
  } finally {
    await nats.close();
  }
});
