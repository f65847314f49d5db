/**
 * The input stream on the real broker (STREAMINFER_TEST_NATS): it captures exactly what the partitions read,
 * and an existing one is brought there when it is the contract's own (everything it holds is under the events
 * prefix, same partition count), refused and left alone otherwise.
 */
import {
  brokerPlacesEvents,
  connectNats,
  inputStreamSpec,
  type NatsHandle,
  PipelineIoError,
  provisionStreams,
  streamLayout,
} from '../../apps/pipeline';
import { NATS_URL, uniqueNames } from './pipeline-kit';

let nats: NatsHandle;
let places: boolean;
const toDelete: string[] = [];

beforeAll(async () => {
  nats = await connectNats({ servers: NATS_URL, name: 'pipeline-input-subjects-test' });
  places = brokerPlacesEvents(nats.nc.info?.version);
});

afterAll(async () => {
  for (const name of toDelete) await nats.jsm.streams.delete(name).catch(() => undefined);
  await nats.close();
});

function fresh(partitions = 4) {
  const names = uniqueNames('insub');
  toDelete.push(names.events);
  const layout = streamLayout({ subjectRoot: names.tag, eventsStream: names.events });
  const prefix = layout.subjects.eventsPrefix;
  return { layout, prefix, spec: inputStreamSpec(layout, partitions, places) };
}

const stored = async (stream: string) => (await nats.jsm.streams.info(stream)).state.messages;

async function refused(subject: string): Promise<boolean> {
  return nats.js.publish(subject, '{}').then(
    () => false,
    () => true,
  );
}

describe('the input stream', () => {
  it('is created with the partition subjects (and, on 2.10+, the delivery subject and its transform)', async () => {
    const { prefix, spec } = fresh();
    const result = await provisionStreams(nats.jsm, [spec]);
    expect(result.created).toEqual([spec.name]);
    const info = await nats.jsm.streams.info(spec.name);
    const partitionSubjects = [0, 1, 2, 3].map((k) => `${prefix}.${k}.*`);
    expect(info.config.subjects).toEqual(places ? [`${prefix}.*`, ...partitionSubjects] : partitionSubjects);
    if (places)
      expect(info.config.subject_transform).toMatchObject({
        src: `${prefix}.*`,
        dest: `${prefix}.{{partition(4,1)}}.{{wildcard(1)}}`,
      });
    expect(await refused(`${prefix}.4.d1`)).toBe(true);
    expect(await refused(`${prefix}.d1`)).toBe(!places);
    expect(await refused(`${prefix}.3.d1`)).toBe(false);
    // Provisioned again (the next start): nothing to change.
    expect(await provisionStreams(nats.jsm, [spec])).toMatchObject({ existing: [spec.name], updated: [] });
  });

  it('made by an earlier version on `<prefix>.>`: narrowed to what is read, earlier messages kept', async () => {
    const { prefix, spec } = fresh();
    await nats.jsm.streams.add({ name: spec.name, subjects: [`${prefix}.>`] });
    await nats.js.publish(`${prefix}.9.stray`, '{}');
    await nats.js.publish(`${prefix}.1.ok`, '{}');
    const result = await provisionStreams(nats.jsm, [spec]);
    expect(result.updated).toHaveLength(1);
    expect(result.updated[0]).toContain(`subjects ${prefix}.> → `);
    expect((await nats.jsm.streams.info(spec.name)).config.subjects).toEqual(spec.subjects);
    expect(await stored(spec.name)).toBe(2);
    expect(await refused(`${prefix}.9.stray`)).toBe(true);
  });

  it('made on 2.9 and provisioned for the broker in use: brought to its form', async () => {
    const { prefix, layout, spec } = fresh();
    // The other broker generation's layout, as if the broker had been upgraded (or downgraded) meanwhile.
    await provisionStreams(nats.jsm, [inputStreamSpec(layout, 4, false)]);
    const result = await provisionStreams(nats.jsm, [spec]);
    expect(result.updated).toHaveLength(places ? 1 : 0);
    const info = await nats.jsm.streams.info(spec.name);
    expect(info.config.subjects).toEqual(spec.subjects);
    expect(await refused(`${prefix}.d1`)).toBe(!places);
  });

  it('made for another partition count: refused, left as it is', async () => {
    const { layout, spec } = fresh(8);
    await provisionStreams(nats.jsm, [inputStreamSpec(layout, 4, places)]);
    const before = (await nats.jsm.streams.info(spec.name)).config;
    const err = await provisionStreams(nats.jsm, [spec]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PipelineIoError);
    expect((err as PipelineIoError).code).toBe('stream_mismatch');
    expect(String(err)).toMatch(/made for 4 partitions and the pipeline has 8/);
    const after = (await nats.jsm.streams.info(spec.name)).config;
    expect(after.subjects).toEqual(before.subjects);
    expect(after.subject_transform).toEqual(before.subject_transform);
  });

  it('capturing other subjects too: refused, left as it is', async () => {
    const { prefix, spec } = fresh();
    const other = `${spec.name}.other.>`;
    await nats.jsm.streams.add({ name: spec.name, subjects: [`${prefix}.>`, other] });
    const err = await provisionStreams(nats.jsm, [spec]).catch((e: unknown) => e);
    expect(String(err)).toMatch(/with subjects no partition consumes .*not updated: it also captures/);
    expect((await nats.jsm.streams.info(spec.name)).config.subjects).toEqual([`${prefix}.>`, other]);
  });
});
