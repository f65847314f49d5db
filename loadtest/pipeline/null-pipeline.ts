/**
 * The null pipeline: the `stream` scenario's reference side, what the broker and the client library carry on
 * this host with no pipeline work at all. Same config file, input stream, partitions and consumer limits as
 * the pipeline; per partition a pull consumer whose every message is republished unchanged (no decoding, no
 * state, no model) to the predictions stream with a Msg-Id, acked once its PubAck is in. It answers the
 * pipeline's GET /health and GET /metrics in the shape the bench reads, so the same measured runs drive it.
 *
 *   node dist/loadtest/pipeline/null-pipeline.js --config <pipeline.json>
 */
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseArgs } from 'node:util';
import { AckPolicy, DeliverPolicy, type JsMsg } from '@nats-io/jetstream';
import {
  brokerPlacesEvents,
  connectNats,
  inputStreamSpec,
  partitionFilter,
  provisionStreams,
  streamLayout,
} from '../../apps/pipeline';
import { loadPipelineConfig } from '../../apps/pipeline/supervise';

const counts = { received: 0, duplicates: 0, invalid: 0, late: 0, dead_letters: 0, predictions: 0 };
let publishFailures = 0;
const lag = { pending: 0, ack_pending: 0 };

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { config: { type: 'string' } } });
  if (!values.config) throw new Error('usage: null-pipeline --config <pipeline.json>');
  // The pipeline's own reading of the file: the same defaults, checks and errors.
  const config = loadPipelineConfig(values.config, {});
  const layout = streamLayout({
    subjectRoot: config.subjectRoot,
    eventsStream: config.streams.events,
    predictionsStream: config.streams.predictions,
    sideStream: config.streams.side,
    duplicateWindowMs: config.streams.duplicateWindowMs,
  });
  const nats = await connectNats({ servers: config.nats.servers, name: 'streaminfer-null-pipeline' });
  const places = brokerPlacesEvents(nats.nc.info?.version);
  await provisionStreams(
    nats.jsm,
    [inputStreamSpec(layout, config.partitions, places), layout.predictions, layout.side],
    1,
  );
  const durables: string[] = [];
  for (let k = 0; k < config.partitions; k++) {
    const durable = `${config.consumer.durable}-null-p${k}`;
    await nats.jsm.consumers.add(layout.events.name, {
      durable_name: durable,
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      filter_subject: partitionFilter(layout.subjects.eventsPrefix, k),
      ack_wait: config.consumer.ackWaitMs * 1_000_000,
      max_ack_pending: config.consumer.maxAckPending,
    });
    durables.push(durable);
  }

  // The pipeline's own in-flight bound (`concurrency`), shared by the partitions.
  let inflight = 0;
  const waiting: (() => void)[] = [];
  const republish = (m: JsMsg, subject: string): void => {
    inflight++;
    nats.js
      .publish(subject, m.data, { msgID: `null-${m.seq}`, timeout: 5000 })
      .then(() => {
        m.ack();
        counts.predictions++;
      })
      .catch(() => {
        publishFailures++;
        m.nak();
      })
      .finally(() => {
        inflight--;
        waiting.shift()?.();
      });
  };
  const run = async (k: number): Promise<void> => {
    const consumer = await nats.js.consumers.get(layout.events.name, durables[k]!);
    const messages = await consumer.consume({ max_messages: config.consumer.batchSize, expires: 5000 });
    const subject = `${layout.subjects.predictionsPrefix}.${k}`;
    for await (const m of messages) {
      counts.received++;
      while (inflight >= config.concurrency) await new Promise<void>((r) => waiting.push(r));
      republish(m, subject);
    }
  };
  for (let k = 0; k < config.partitions; k++)
    void run(k).catch((err: unknown) => {
      console.error(`partition ${k}: ${String(err)}`);
      process.exit(1);
    });

  const poll = setInterval(() => {
    void Promise.all(durables.map((d) => nats.jsm.consumers.info(layout.events.name, d)))
      .then((infos) => {
        lag.pending = infos.reduce((a, i) => a + i.num_pending, 0);
        lag.ack_pending = infos.reduce((a, i) => a + i.num_ack_pending, 0);
      })
      .catch(() => undefined);
  }, 250);

  const server = http.createServer((req, res) => {
    if (req.url === '/health') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          state: 'running',
          consuming: true,
          paused: false,
          consumer: { ...lag, oldest_unprocessed_age_s: 0 },
          freshness: { p50_ms: 0, p95_ms: 0, p99_ms: 0 },
          counts: { ...counts, publish_failures: publishFailures },
          state_keys: 0,
          state_bytes: 0,
        }),
      );
      return;
    }
    if (req.url === '/metrics') {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.end('');
      return;
    }
    res.writeHead(404).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  console.log(JSON.stringify({ msg: 'null pipeline ready', admin: (server.address() as AddressInfo).port }));
  const stop = () => {
    clearInterval(poll);
    server.close();
    void nats.close().finally(() => process.exit(0));
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}

// A bench process of its own: a failed start or a dead partition loop ends it with a status the bench reads.
main().catch((err: unknown) => {
  console.error(String(err instanceof Error ? err.stack : err));
  process.exit(1);
});
