/**
 * One instance of the `stream-ownership` bench: it works partitions of a stream the way one partition owner
 * of the pipeline does, with one of two ownership mechanisms, and says on stdout what it did.
 *
 *   lease:  the pipeline's own LeaseKeeper (KV leases on their own thread); on acquire it consumes the
 *           partition's durable (JetStreamSource), and before each effect checks holds(p, token) with its
 *           acquisition's token — the fence partition.ts applies — naking the message when not held.
 *   pinned: NATS 2.11 priority groups: every instance pulls from every partition's durable in group
 *           `owners` (policy pinned_client); the server delivers only to the pinned one. The only signal it
 *           has of losing the pin is the client's `consumer_unpinned` status (a 423 on its next pull); it
 *           fences on that.
 *   pinned-timed: pinned, and also fenced once its last pull is priority_timeout old (the server unpins a
 *           client that has not pulled for that long): a "valid until" like the lease's, from the time
 *           nats.js reports the pull (its `next` notification, read asynchronously).
 *
 * "Processing" is a busy loop of workUs per message (the decide + predict step), then the effect: one stdout
 * line, written synchronously (stdout is a pipe: a write has landed before the ack goes), then the ack.
 * Lines: `E <p> <seq> <ms>` effect, `F <p> <seq> <ms>` fenced (no effect; nak), `O <p> <ms> +|-` ownership
 * gained / lost, `R <ms>` ready. With `gated`, nothing is processed before SIGUSR2 (the throughput phase
 * fills a backlog first). Run by the bench: `node ownership-worker.js '<json config>'` (no secrets in it:
 * the bench's own broker has no auth).
 */
import type { ConsumerMessages, JsMsg } from '@nats-io/jetstream';
import pino from 'pino';
import {
  connectNats,
  JetStreamSource,
  LeaseKeeper,
  type NatsHandle,
  partitionFilter,
} from '../../apps/pipeline';
import { loadNatsAuth } from '../../libs/nats-auth';
import { type OwnershipWorkerConfig, PRIORITY_GROUP } from './ownership-worker-config';

const now = (): number => Date.now();

function line(text: string): void {
  process.stdout.write(`${text}\n`);
}

function busy(us: number): void {
  const until = process.hrtime.bigint() + BigInt(us) * 1000n;
  while (process.hrtime.bigint() < until) {
    // spin: the per-message CPU of deciding and predicting
  }
}

let opened: () => void;
const gate = new Promise<void>((resolve) => {
  opened = resolve;
});

async function runLease(cfg: OwnershipWorkerConfig, nats: NatsHandle): Promise<void> {
  const auth = loadNatsAuth({ servers: cfg.url });
  const logger = pino({ level: 'warn' }, pino.destination(2));
  const keeper = await LeaseKeeper.open({
    auth,
    bucket: cfg.bucket,
    group: cfg.durable,
    instanceId: cfg.instanceId,
    partitions: cfg.partitions,
    ttlMs: cfg.ttlMs,
    logger,
  });
  const sources = new Map<number, JetStreamSource>();
  // The acquisition a loop belongs to: a loop of a lease that was lost stops taking messages (as the
  // pipeline's Partition aborts its runner), even once this instance holds the partition again.
  const current = new Map<number, object>();
  keeper.start({
    acquire: async (p, token) => {
      const generation = {};
      current.set(p, generation);
      const source = await JetStreamSource.open(nats.js, nats.jsm, {
        stream: cfg.stream,
        durable: `${cfg.durable}-p${p}`,
        filterSubject: partitionFilter(cfg.subjectPrefix, p),
        maxAckPending: 10_000,
        ackWaitMs: cfg.ackWaitMs,
        maxDeliver: -1,
        batchSize: cfg.batch,
      });
      sources.set(p, source);
      line(`O ${p} ${now()} +`);
      void (async () => {
        for await (const m of source.messages()) {
          if (current.get(p) !== generation) break;
          await gate;
          busy(cfg.workUs);
          if (!keeper.holds(p, token) || current.get(p) !== generation) {
            line(`F ${p} ${m.streamSeq} ${now()}`);
            m.nak();
            continue;
          }
          line(`E ${p} ${m.streamSeq} ${now()}`);
          await m.ack();
        }
      })().catch((err: unknown) => process.stderr.write(`partition ${p}: ${String(err)}\n`));
    },
    release: async (p) => {
      current.delete(p);
      line(`O ${p} ${now()} -`);
      const source = sources.get(p);
      sources.delete(p);
      await source?.stop();
    },
  });
}

async function runPinned(cfg: OwnershipWorkerConfig, nats: NatsHandle): Promise<void> {
  for (let p = 0; p < cfg.partitions; p++) {
    const consumer = await nats.js.consumers.get(cfg.stream, `${cfg.durable}-p${p}`);
    const messages: ConsumerMessages = await consumer.consume({
      group: PRIORITY_GROUP,
      max_messages: cfg.batch,
      expires: cfg.expiresMs,
    });
    let unpinned = false;
    // When nats.js sent its last pull (its `next` notification): the server unpins priority_timeout after it.
    let lastPullMs = now();
    const timed = cfg.mode === 'pinned-timed';
    void (async () => {
      for await (const s of messages.status()) {
        if (s.type === 'next') lastPullMs = now();
        else if (s.type === 'consumer_pinned') {
          unpinned = false;
          line(`O ${p} ${now()} +`);
        } else if (s.type === 'consumer_unpinned') {
          unpinned = true;
          line(`O ${p} ${now()} -`);
        }
      }
    })();
    void (async () => {
      for await (const m of messages as AsyncIterable<JsMsg>) {
        await gate;
        busy(cfg.workUs);
        const seq = m.info.streamSequence;
        if (unpinned || (timed && now() >= lastPullMs + cfg.ttlMs)) {
          line(`F ${p} ${seq} ${now()}`);
          m.nak();
          continue;
        }
        line(`E ${p} ${seq} ${now()}`);
        m.ack();
      }
    })().catch((err: unknown) => process.stderr.write(`partition ${p}: ${String(err)}\n`));
  }
}

async function main(): Promise<void> {
  const cfg = JSON.parse(process.argv[2] ?? '') as OwnershipWorkerConfig;
  process.on('SIGUSR2', () => opened());
  if (!cfg.gated) opened();
  const nats = await connectNats({ servers: cfg.url, name: `ownership-${cfg.instanceId}` });
  process.on('SIGTERM', () => {
    void nats.close().finally(() => process.exit(0));
  });
  if (cfg.mode === 'lease') await runLease(cfg, nats);
  else await runPinned(cfg, nats);
  line(`R ${now()}`);
}

main().catch((err: unknown) => {
  process.stderr.write(`ownership worker: ${String(err)}\n`);
  process.exit(1);
});
