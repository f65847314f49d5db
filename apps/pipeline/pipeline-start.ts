/**
 * An instance's start-up I/O: its connections (the checkpoints' own when checkpointing), the streams it
 * provisions, the side-output spool and the sink every partition publishes through.
 */
import path from 'node:path';
import type { Logger } from 'pino';
import type { NatsAuth } from '../../libs/nats-auth';
import { type PipelineConfig, spoolDir } from './config';
import { connectNats, type NatsHandle } from './connection';
import { brokerPlacesEvents, inputStreamSpec } from './io/input-stream';
import type { StreamLayout } from './io/layout';
import { provisionStreams } from './io/provision';
import { JetStreamSink } from './io/sink';
import { SideOutputSpool } from './io/spool';
import type { PipelineMetrics } from './metrics';
import type { PipelineCounts } from './partition-context';

export interface InstanceIo {
  nats: NatsHandle;
  /** Checkpoint mode only. */
  checkpointNats: NatsHandle | undefined;
  /** spool.enabled only. */
  spool: SideOutputSpool | undefined;
  sink: JetStreamSink;
}

/**
 * Opens them in order, each kept in `into` as soon as it is open: an instance whose start fails halfway
 * closes what it had opened when it is stopped.
 */
export async function openInstanceIo(o: {
  into: Partial<InstanceIo>;
  config: PipelineConfig;
  auth: NatsAuth;
  instanceId: string;
  layout: StreamLayout;
  metrics: PipelineMetrics;
  logger: Logger;
  clock: () => number;
  counts: PipelineCounts;
}): Promise<InstanceIo> {
  const { config, auth, layout, metrics, logger } = o;
  const onProblem = (message: string) => logger.error({ servers: auth.shown }, message);
  const replicas = config.replicas;
  const nats = await connectNats({
    auth,
    onProblem,
    replicas,
    name: `streaminfer-stream-${o.instanceId}`,
  });
  o.into.nats = nats;
  const checkpointNats = config.checkpoint.enabled
    ? await connectNats({
        auth,
        onProblem,
        replicas,
        name: `streaminfer-stream-${o.instanceId}-checkpoints`,
      })
    : undefined;
  o.into.checkpointNats = checkpointNats;
  const places = brokerPlacesEvents(nats.nc.info?.version);
  const provisioned = await provisionStreams(
    nats.jsm,
    [inputStreamSpec(layout, config.partitions, places), layout.predictions, layout.side],
    replicas,
  );
  for (const change of provisioned.updated) logger.warn({ change }, 'input stream updated');
  if (!places)
    logger.warn(
      { server: nats.nc.info?.version, subject: `${layout.subjects.eventsPrefix}.<k>.<delivery_id>` },
      'this broker cannot place events (stream subject transforms need nats-server 2.10+): producers publish ' +
        'to the partition subject; a publish to <events>.<delivery_id> is refused',
    );
  const spool = config.spool.enabled
    ? await SideOutputSpool.open({
        dir: path.join(spoolDir(config), config.consumer.durable),
        maxBytes: config.spool.maxBytes,
        logger,
        clock: o.clock,
        publish: async (r) => {
          await nats.js.publish(r.subject, r.data, { msgID: r.msgId, timeout: 5000 });
        },
        onReplayed: (r) => {
          if (r.kind === 'late') return;
          o.counts.dead_letters++;
          metrics.outputs.deadLetters.inc({ reason: r.kind });
        },
      })
    : undefined;
  o.into.spool = spool;
  const sink = new JetStreamSink(nats.js, {
    ...(spool ? { spool } : {}),
    onPublishFailure: (effect, attempt, err) => {
      metrics.outputs.sinkFailures.inc();
      logger.warn({ subject: effect.subject, attempt, err: String(err) }, 'publish failed; retrying');
    },
    maxPayload: () => nats.nc.info?.max_payload,
    onFitted: (effect, bytes) => {
      metrics.outputs.truncatedSideOutputs.inc();
      logger.warn(
        { subject: effect.subject, msgId: effect.msgId, bytes, maxPayload: nats.nc.info?.max_payload },
        'side output over the broker max_payload: published with its payload truncated',
      );
    },
  });
  o.into.sink = sink;
  return { nats, checkpointNats, spool, sink };
}
