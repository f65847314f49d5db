/**
 * The pipeline's settings, from outside: a model or version the repository does not hold stops
 * `streaminfer pipeline` with exit 2 and the reason, like every other bad setting (no restart loop), and a
 * reload to one answers 404 with the typed code. Only the public contract: the command, its exit status
 * and output, the admin API.
 */
import type { ChildProcess } from 'node:child_process';
import { connectNats, type NatsHandle } from '../../apps/pipeline';
import { modelsSubset } from '../integration/harness';
import {
  deleteStreams,
  NATS_URL,
  type PipelineCli,
  type StreamNames,
  startPipelineCli,
  stopChild,
  uniqueNames,
  writePipelineConfig,
} from '../integration/pipeline-kit';

let nats: NatsHandle;
const created: StreamNames[] = [];
const children: ChildProcess[] = [];

beforeAll(async () => {
  nats = await connectNats({ servers: NATS_URL, name: 'conformance-pipeline-settings' });
});

afterAll(async () => {
  await Promise.all(children.map(stopChild));
  await deleteStreams(nats, created);
  await nats.close();
});

function start(names: StreamNames, model: Record<string, string>): PipelineCli {
  created.push(names);
  const file = writePipelineConfig(
    names,
    { maxAckPending: 512, ackWaitMs: 5_000, batchSize: 64 },
    {
      model,
      concurrency: 256,
      checkpoint: { enabled: true, intervalMs: 1_000, bucket: `${names.tag}_ckpt` },
      inference: { mode: 'embedded', modelsDir: modelsSubset(['delay-risk']) },
    },
  );
  const stream = startPipelineCli(['--config', file]);
  children.push(stream.child);
  return stream;
}

/** The exit status, or 'running' if the command is still up after `ms` (a restart loop). */
function exitWithin(stream: PipelineCli, ms: number): Promise<number | null | 'running'> {
  return Promise.race([
    stream.exited,
    new Promise<'running'>((resolve) => setTimeout(() => resolve('running'), ms).unref()),
  ]);
}

describe('pipeline settings (public contract)', () => {
  it.each([
    [{ name: 'delay-risk', version: '9' }, /has no version "9"/],
    [{ name: 'no-such-model', version: '1' }, /no-such-model|unknown_model/],
  ])(
    'model %j not in the repository: exit 2 with the reason, no restart',
    async (model, reason) => {
      const stream = start(uniqueNames('cps'), model);
      expect(await exitWithin(stream, 25_000)).toBe(2);
      expect(stream.output()).toMatch(reason);
      expect(stream.output()).not.toContain('restarting');
    },
    60_000,
  );

  it('a reload to a version or model the repository does not hold answers 404 with its code', async () => {
    const stream = start(uniqueNames('cpr'), { name: 'delay-risk', version: '1' });
    const { admin } = await stream.ready();
    const reload = async (body: Record<string, string>) => {
      const res = await fetch(`http://127.0.0.1:${admin}/api/reload`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      return { status: res.status, body: (await res.json()) as Record<string, unknown> };
    };
    expect(await reload({ version: '9' })).toMatchObject({
      status: 404,
      body: { result: 'failed', code: 'unknown_version', epoch: 1 },
    });
    expect(await reload({ model: 'no-such-model', version: '1' })).toMatchObject({
      status: 404,
      body: { result: 'failed', code: 'unknown_model', epoch: 1 },
    });
    expect(await reload({ version: '1' })).toMatchObject({ status: 200, body: { result: 'unchanged' } });
  }, 60_000);
});
