/**
 * The NATS cluster kit: three nodes form one JetStream cluster (one meta leader all agree on); an R3 stream
 * has a leader the kit finds; killing that leader elects another and the stream keeps taking writes; the node
 * restarts on its own store; in netns mode a partitioned node is cut off and comes back after heal.
 */
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { type NatsCluster, startNatsCluster } from './nats-cluster-kit';

jest.setTimeout(120_000);

let cluster: NatsCluster;

beforeAll(async () => {
  cluster = await startNatsCluster();
  console.log(`nats cluster kit: ${cluster.isolation}, ${cluster.version}`);
});

afterAll(async () => {
  await cluster?.destroy();
});

test('three nodes, one meta leader; a stream leader killed is replaced and the node rejoins', async () => {
  expect(cluster.size).toBe(3);
  const meta = await cluster.metaLeader();
  expect(meta).toBeDefined();
  for (let k = 0; k < 3; k++)
    expect((await cluster.jsz(k))?.['meta_cluster']).toMatchObject({ cluster_size: 3 });

  // A black-holed server is noticed by missed pings: 1 s apart here (nats.js's default is 2 min).
  const nc = await connect({
    servers: cluster.urls.split(','),
    maxReconnectAttempts: -1,
    reconnectTimeWait: 100,
    pingInterval: 1000,
    maxPingOut: 2,
  });
  try {
    const jsm = await jetstreamManager(nc);
    const js = jetstream(nc, { timeout: 5000 });
    await jsm.streams.add({ name: 'KIT', subjects: ['kit.>'], num_replicas: 3 });
    await cluster.waitStreamReady('KIT');
    const leader = await cluster.streamLeader('KIT');
    expect(leader).toBeDefined();
    await js.publish('kit.a', 'one');

    await cluster.kill(leader!);
    expect(cluster.running(leader!)).toBe(false);
    let next: number | undefined;
    const until = Date.now() + 30_000;
    while ((next = await cluster.streamLeader('KIT')) === undefined || next === leader) {
      if (Date.now() > until) throw new Error('no new leader for KIT');
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    await publishRetrying(js, 'kit.b');
    await cluster.start(leader!);
    await cluster.waitReady();
    await cluster.waitStreamReady('KIT');
    expect((await jsm.streams.info('KIT')).state.messages).toBe(2);

    if (!cluster.available) {
      console.log('nats cluster kit: loopback, no partition test');
      return;
    }
    const cut = (await cluster.streamLeader('KIT'))!;
    cluster.partition(cut);
    const fetchCut = await fetch(`${cluster.monitorUrl(cut)}/healthz`, {
      signal: AbortSignal.timeout(1000),
    }).then(
      () => 'answered',
      () => 'no answer',
    );
    expect(fetchCut).toBe('no answer');
    await publishRetrying(js, 'kit.c');
    await cluster.heal(cut);
    await cluster.waitReady();
    await cluster.waitStreamReady('KIT');
    expect((await jsm.streams.info('KIT')).state.messages).toBe(3);
  } finally {
    await nc.close();
  }
});

/** A publish during an election may time out: retried with the same message id (deduplicated). */
async function publishRetrying(js: ReturnType<typeof jetstream>, subject: string): Promise<void> {
  const until = Date.now() + 30_000;
  for (;;) {
    try {
      await js.publish(subject, 'x', { msgID: subject });
      return;
    } catch (err) {
      if (Date.now() > until) throw err;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
}
