/**
 * Conformance: a restart never undoes a reload. `streaminfer reload --version 2` records
 * epoch 2 in the epoch log; a plain restart with the unchanged config (which still says version 1) continues
 * epoch 2 on version 2; only `--version` on the command line moves it, recorded as a transition; and a crash
 * restart after that follows the log again (a reload made since stays), as does a SIGHUP with the unchanged file.
 */
import type { ChildProcess } from 'node:child_process';
import { cpSync } from 'node:fs';
import path from 'node:path';
import { connectNats, type NatsHandle } from '../../apps/pipeline';
import type { Prediction } from '../../libs/delivery';
import { MODELS_DIR, modelsSubset, runCliToExit } from '../integration/harness';
import {
  deleteStreams,
  eventSubjectFor,
  NATS_URL,
  type PipelineCli,
  readStream,
  type StreamNames,
  startPipelineCli,
  uniqueNames,
  waitFor,
  writePipelineConfig,
} from '../integration/pipeline-kit';

let nats: NatsHandle;
const created: StreamNames[] = [];
const children: ChildProcess[] = [];

beforeAll(async () => {
  nats = await connectNats({ servers: NATS_URL, name: 'conformance-epochs' });
});

afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  await deleteStreams(nats, created);
  await nats.close();
});

interface Pipeline {
  epoch: number;
  version: string;
}

async function pipeline(admin: number): Promise<Pipeline> {
  return (await (await fetch(`http://127.0.0.1:${admin}/api/pipeline`)).json()) as Pipeline;
}

async function epochLog(names: StreamNames) {
  return (await readStream(nats, names.predictions, `${names.tag}.delivery.epochs`)).map((m) =>
    m.json<{ epoch: number; version: string; reason: string }>(),
  );
}

function start(file: string, args: string[] = []): PipelineCli {
  const cli = startPipelineCli(['--config', file, ...args]);
  children.push(cli.child);
  return cli;
}

async function stop(cli: PipelineCli): Promise<void> {
  cli.child.kill('SIGTERM');
  expect(await cli.exited).toBe(0);
}

it('a plain restart continues the reloaded epoch; --version is a recorded transition; a crash restart follows the log', async () => {
  const names = uniqueNames('cep');
  created.push(names);
  const models = modelsSubset([], ['delay-risk']);
  cpSync(path.join(MODELS_DIR, 'delay-risk', '1'), path.join(models, 'delay-risk', '2'), { recursive: true });
  // The config pins version 1 throughout, as a deploy that never changes it.
  const file = writePipelineConfig(
    names,
    { maxAckPending: 512, ackWaitMs: 5_000, batchSize: 64 },
    {
      partitions: 1,
      concurrency: 256,
      model: { name: 'delay-risk', version: '1' },
      inference: { mode: 'embedded', modelsDir: models },
      checkpoint: { enabled: true, intervalMs: 1_000, bucket: `${names.tag}_ckpt` },
    },
  );

  const first = start(file);
  const a = await first.ready();
  expect(await pipeline(a.admin)).toMatchObject({ epoch: 1, version: '1' });
  const reload = await runCliToExit([
    'reload',
    '--url',
    `http://127.0.0.1:${a.admin}`,
    '--model',
    'delay-risk',
    '--version',
    '2',
  ]);
  expect(reload.code).toBe(0);
  expect(await pipeline(a.admin)).toMatchObject({ epoch: 2, version: '2' });
  await stop(first);

  // A routine restart with the unchanged config: still epoch 2 on version 2, nothing recorded.
  const second = start(file);
  const b = await second.ready();
  expect(await pipeline(b.admin)).toMatchObject({ epoch: 2, version: '2' });
  const now = Date.now();
  const at = (ms: number) => new Date(ms).toISOString();
  for (const [id, payload] of [
    [
      'st-e1',
      {
        event_id: 'st-e1',
        delivery_id: 'e1',
        event_time: at(now - 2000),
        type: 'status',
        status: 'picked_up',
        promised_time: at(now + 30 * 60_000),
        dest_lat: 13.02,
        dest_lon: 77.5946,
        route_id: 'r1',
      },
    ],
    [
      'e1-g0',
      {
        event_id: 'e1-g0',
        delivery_id: 'e1',
        event_time: at(now - 1000),
        type: 'gps',
        driver_lat: 12.97,
        driver_lon: 77.59,
      },
    ],
  ] as const)
    await nats.js.publish(eventSubjectFor(names, 'e1', 1), JSON.stringify(payload), { msgID: id });
  await waitFor(
    'a prediction',
    async () => (await readStream(nats, names.predictions, `${names.tag}.delivery.predictions.>`)).length > 0,
    20_000,
  );
  const [p] = (await readStream(nats, names.predictions, `${names.tag}.delivery.predictions.>`)).map((m) =>
    m.json<Prediction>(),
  );
  expect(p).toMatchObject({ version: '2', epoch: 2 });
  expect(second.output()).toContain('following the log');
  // SIGHUP with the unchanged file (a certificate rotation, `systemctl reload`): the model stays.
  process.kill(second.child.pid!, 'SIGHUP');
  await waitFor('SIGHUP handled', () => second.output().includes('SIGHUP: model unchanged'), 10_000).catch(
    () => undefined,
  );
  await new Promise((resolve) => setTimeout(resolve, 1500));
  expect(await pipeline(b.admin)).toMatchObject({ epoch: 2, version: '2' });
  await stop(second);
  expect((await epochLog(names)).map((e) => [e.epoch, e.version])).toEqual([
    [1, '1'],
    [2, '2'],
  ]);

  // The operator says otherwise on the command line: a transition, recorded and logged.
  const third = start(file, ['--version', '1']);
  const c = await third.ready();
  expect(await pipeline(c.admin)).toMatchObject({ epoch: 3, version: '1' });
  expect(third.output()).toContain('--version on the command line overrides the epoch log');
  const log = await epochLog(names);
  expect(log.map((e) => [e.epoch, e.version, e.reason])).toEqual([
    [1, '1', 'start'],
    [2, '2', 'admin api'],
    [3, '1', 'start --version'],
  ]);

  // A reload after that, then a crash: the supervisor's restart follows the log, not --version.
  expect(
    (
      await runCliToExit([
        'reload',
        '--url',
        `http://127.0.0.1:${c.admin}`,
        '--model',
        'delay-risk',
        '--version',
        '2',
      ])
    ).code,
  ).toBe(0);
  process.kill(c.pid, 'SIGKILL');
  const d = await third.ready(2);
  expect(await pipeline(d.admin)).toMatchObject({ epoch: 4, version: '2' });
  expect((await epochLog(names)).length).toBe(4);
  await stop(third);
}, 150_000);
