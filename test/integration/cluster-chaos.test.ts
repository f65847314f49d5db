/**
 * A two-host fleet (replicas 3) on a 3-node JetStream cluster of the current nats-server, under light inference
 * load, through NATS faults: the meta leader killed, the registry KV's leader killed, the node a host is
 * connected to partitioned away (netns only) and healed, every node restarted one by one. Proves that serving never depends on NATS (0 failed requests over the whole run) and that fleet
 * changes resume after each fault: a canary change is accepted (200) and both hosts converge to its epoch;
 * the time from the fault to the accepted change is printed per fault. Each NATS node and each host has a
 * network namespace of its own where namespaces work (root), else all share the loopback (the log says which).
 */
import { randomBytes } from 'node:crypto';
import { admin, type FleetHost, health, pixels, startFleetHost, stopHost, waitFor } from './fleet-kit';
import { type Answer, WsClient } from './harness';
import { type NatsCluster, startNatsCluster } from './nats-cluster-kit';
import { createFleetNet, type FleetNet } from './netns-kit';

jest.setTimeout(300_000);

const FLEET = `c${randomBytes(3).toString('hex')}`;
const REGISTRY_STREAM = `KV_streaminfer_fleet_${FLEET}`;
// Namespaces 0-2 hold the NATS nodes, 3-4 the hosts.
const NODES = [0, 1, 2];
const HOST_SLOTS = [3, 4];
const STEP_ENV = { STREAMINFER_RELOAD_STEP_TIMEOUT_MS: '4000' };

let net: FleetNet;
let cluster: NatsCluster;
const hosts: FleetHost[] = [];
let percent = 0;

beforeAll(async () => {
  net = await createFleetNet({ hosts: NODES.length + HOST_SLOTS.length, prefix: 'scc' });
  cluster = await startNatsCluster({ net, nodes: NODES });
  console.log(`cluster chaos: ${cluster.isolation}, ${cluster.version}`);
  for (const slot of HOST_SLOTS)
    hosts.push(
      await startFleetHost(net, slot, {
        fleet: FLEET,
        cluster: cluster.urls,
        args: ['--cluster-replicas', '3'],
        env: STEP_ENV,
      }),
    );
  await cluster.waitStreamReady(REGISTRY_STREAM);
});

afterAll(async () => {
  await Promise.all(hosts.map((host) => stopHost(host)));
  await cluster?.destroy();
  await net?.destroy();
});

/** One WebSocket per host, two requests in flight each, until stopped. */
function load() {
  let running = true;
  let answered = 0;
  const failures: string[] = [];
  const done = Promise.all(
    hosts.map(async (host) => {
      const client = await WsClient.connect(host.wsUrl);
      let id = 0;
      await Promise.all(
        [0, 1].map(async () => {
          while (running) {
            const n = id++;
            try {
              const answer: Answer = await client.request(
                { id: n, model: 'digits', input: pixels(n) },
                30_000,
              );
              if (answer.type === 'error') failures.push(`${host.id}: ${answer.code}: ${answer.message}`);
              else answered++;
            } catch (error) {
              failures.push(`${host.id}: ${(error as Error).message}`);
            }
            // Light load: the CPUs also run three nats-servers electing leaders.
            await new Promise((resolve) => setTimeout(resolve, 5));
          }
        }),
      );
      client.close();
    }),
  );
  return {
    failures,
    answered: () => answered,
    stop: async () => {
      running = false;
      await done;
    },
  };
}

/**
 * Asks one canary change (a share not asked before) of alternating hosts until one is accepted; resolves with
 * the ms from `since` to the accepted answer, once both hosts serve its epoch.
 */
async function nextChangeAccepted(since: number, what: string): Promise<{ ms: number; refused: string[] }> {
  percent = (percent % 50) + 5;
  const until = Date.now() + 90_000;
  const answers: string[] = [];
  // Which host said what: a refusal's message names its cause (a lease holder, a revision).
  const messages: string[] = [];
  for (let attempt = 0; ; attempt++) {
    const host = hosts[attempt % hosts.length]!;
    const answer = await admin(host.adminUrl, 'POST', '/api/models/digits/canary', { percent }, 20_000);
    if (answer.status === 200) {
      const accepted = Date.now() - since;
      const epoch = answer.body.epoch as number;
      await waitFor(
        async () =>
          (await Promise.all(hosts.map((h) => health(h.url)))).every((a) => a?.body.epoch === epoch),
        30_000,
        () => `${what}: hosts did not converge to epoch ${epoch}`,
      );
      return { ms: accepted, refused: answers };
    }
    answers.push(`${answer.status} ${String(answer.body.code ?? answer.body.error ?? '')}`);
    messages.push(`${host.id}: ${answer.status} ${String(answer.body.message ?? '')}`);
    if (Date.now() > until)
      throw new Error(
        `${what}: no fleet change accepted in 90 s; answers: ${answers.slice(-5).join(', ')}\n${messages.slice(-6).join('\n')}`,
      );
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

test('meta leader, registry leader and every node restarted: 0 failed requests, changes resume', async () => {
  const candidate = await admin(hosts[0]!.adminUrl, 'POST', '/api/models/digits/candidate', { version: '1' });
  expect(candidate.status).toBe(200);
  await nextChangeAccepted(Date.now(), 'before any fault');

  const traffic = load();
  let partitioned: number | undefined;
  const report: { fault: string; failed: number; changeAcceptedMs: number; refused: string }[] = [];
  const fault = async (name: string, act: () => Promise<number | undefined>) => {
    const failedBefore = traffic.failures.length;
    const since = Date.now();
    const killed = await act();
    const { ms: changeAcceptedMs, refused } = await nextChangeAccepted(since, name);
    if (killed !== undefined) {
      await cluster.start(killed);
      await cluster.waitReady();
      await cluster.waitStreamReady(REGISTRY_STREAM);
    }
    // What the changes asked before the accepted one were answered, counted by status and code.
    const counts = new Map<string, number>();
    for (const answer of refused) counts.set(answer, (counts.get(answer) ?? 0) + 1);
    report.push({
      fault: name,
      failed: traffic.failures.length - failedBefore,
      changeAcceptedMs,
      refused: [...counts].map(([answer, n]) => `${n}× ${answer}`).join(', ') || 'none',
    });
  };

  try {
    await fault('kill the meta leader', async () => {
      const leader = (await cluster.metaLeader())!;
      await cluster.kill(leader);
      return leader;
    });
    await fault('kill the registry KV leader', async () => {
      const leader = (await cluster.streamLeader(REGISTRY_STREAM))!;
      await cluster.kill(leader);
      return leader;
    });
    if (cluster.available)
      await fault(`partition the node host ${hosts[0]!.id} is connected to`, async () => {
        const node = await cluster.clientNode(`streaminfer-${FLEET}-${hosts[0]!.id}`);
        if (node === undefined) throw new Error(`host ${hosts[0]!.id} has no NATS connection`);
        cluster.partition(node);
        partitioned = node;
        return undefined;
      });
    else console.log('cluster chaos: loopback, no partition fault');
    if (partitioned !== undefined) {
      await cluster.heal(partitioned);
      await cluster.waitReady(60_000);
      await cluster.waitStreamReady(REGISTRY_STREAM);
    }
    for (let k = 0; k < cluster.size; k++)
      await fault(`restart node n${k}`, async () => {
        await cluster.kill(k, 'SIGTERM');
        await cluster.start(k);
        await cluster.waitReady();
        return undefined;
      });
  } finally {
    await traffic.stop();
  }
  console.log(
    `cluster chaos (${cluster.isolation}, ${cluster.version}): ${traffic.answered()} requests answered, ${
      traffic.failures.length
    } failed\n${report.map((r) => `  ${r.fault}: ${r.failed} failed, next change accepted after ${r.changeAcceptedMs} ms (refused before: ${r.refused})`).join('\n')}`,
  );
  expect(traffic.failures.slice(0, 5)).toEqual([]);
  // A change refused while NATS elects a leader says so (503 cluster_unavailable), never 500 internal.
  expect(report.filter((r) => r.refused.includes('internal'))).toEqual([]);
  expect(traffic.answered()).toBeGreaterThan(100);
  expect(report).toHaveLength(cluster.available ? 6 : 5);
});
