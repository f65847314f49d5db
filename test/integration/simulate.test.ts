/**
 * `streaminfer simulate` as a separate process against the real broker (the shared test broker,
 * broker-kit): what it leaves in the stream must match its summary. Each run uses a stream
 * and subject root of its own, deleted after.
 */
import { type ConsumerMessages, DeliverPolicy } from '@nats-io/jetstream';
import type { SimulateSummary as Summary } from '../../apps/cli/commands/simulate';
import { connectNats, eventSubject, type NatsHandle } from '../../apps/pipeline';
import { parseEvent } from '../../libs/delivery';
import { TEST_NATS_URL } from './broker-kit';
import { runCli, runCliToExit } from './harness';

const NATS_URL = TEST_NATS_URL;

let nats: NatsHandle;
let counter = 0;
const toDelete: string[] = [];

function unique(): { root: string; stream: string; args: string[] } {
  const tag = `sim${process.pid}t${Date.now() % 1_000_000}n${counter++}`;
  const stream = `${tag}_EVENTS`;
  toDelete.push(stream);
  return { root: tag, stream, args: ['--nats', NATS_URL, '--subject-root', tag, '--events-stream', stream] };
}

function lastJsonLine(out: string): Summary {
  const line = out
    .trim()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .pop();
  if (!line) throw new Error(`no JSON summary in:\n${out}`);
  return JSON.parse(line) as Summary;
}

/** Every message of a stream, in order. */
async function readStream(
  stream: string,
): Promise<Array<{ subject: string; data: Uint8Array; msgId?: string }>> {
  const total = (await nats.jsm.streams.info(stream)).state.messages;
  const consumer = await nats.js.consumers.get(stream, { deliver_policy: DeliverPolicy.All });
  const out: Array<{ subject: string; data: Uint8Array; msgId?: string }> = [];
  if (total === 0) return out;
  const messages: ConsumerMessages = await consumer.consume();
  for await (const m of messages) {
    const msgId = m.headers?.get('Nats-Msg-Id');
    out.push({ subject: m.subject, data: m.data, ...(msgId ? { msgId } : {}) });
    if (out.length >= total) break;
  }
  await messages.close();
  return out;
}

beforeAll(async () => {
  nats = await connectNats({ servers: NATS_URL, name: 'simulate-test' });
});

afterAll(async () => {
  for (const name of toDelete) await nats.jsm.streams.delete(name).catch(() => undefined);
  await nats.close();
});

describe('streaminfer simulate', () => {
  it('publishes the workload: the stream holds one message per unique event, invalid ones as counted', async () => {
    const { root, stream, args } = unique();
    // A core subscriber sees the subject a message was published to (the stream may store it transformed).
    const published = { delivery: 0, partition: 0 };
    const delivery = nats.nc.subscribe(`${root}.delivery.events.*`, { callback: () => published.delivery++ });
    const partition = nats.nc.subscribe(`${root}.delivery.events.*.*`, {
      callback: () => published.partition++,
    });
    await nats.nc.flush();
    const started = Date.now();
    const { code, out } = await runCliToExit([
      'simulate',
      '--rate',
      '40',
      '--deliveries',
      '40',
      '--duration',
      '4',
      '--disorder-s',
      '1',
      '--duplicates',
      '0.2',
      '--too-late',
      '0.3',
      '--too-late-delay-s',
      '0',
      '--invalid',
      '0.25',
      // Seed 1 puts records of every kind inside these 4 s (a too-late one waits up to 30 s more).
      '--seed',
      '1',
      '--json',
      ...args,
    ]);
    expect({ code, out }).toMatchObject({ code: 0 });
    const s = lastJsonLine(out);
    console.log(`simulate run: ${JSON.stringify(s)} (wall ${Date.now() - started} ms)`);
    expect(s.stopped).toBe('duration');
    expect(s.stream).toBe(stream);
    expect(s.subject_prefix).toBe(`${root}.delivery.events`);
    expect(s.failed).toBe(0);
    // The summary adds up.
    expect(s.sent).toBe(s.events + s.duplicates + s.too_late + s.invalid);
    expect(s.stored).toBe(s.sent - s.broker_duplicates);
    // Every duplicate re-sends a Msg-Id already stored, well inside the window: the broker drops each one.
    expect(s.duplicates).toBeGreaterThan(0);
    expect(s.too_late).toBeGreaterThan(0);
    expect(s.invalid).toBeGreaterThan(0);
    expect(s.broker_duplicates).toBe(s.duplicates);
    expect(s.deliveries).toBeGreaterThan(0);
    expect(s.deliveries).toBeLessThanOrEqual(40);
    expect(s.deliveries_late).toBeLessThanOrEqual(s.deliveries);
    expect(s.elapsed_s).toBeGreaterThanOrEqual(4);
    expect(s.rate_actual).toBeCloseTo(s.sent / s.elapsed_s, 0);
    // Progress lines went to stderr while it ran.
    expect(out).toMatch(/simulate t=\d+\.\ds \d+ events\/s {2}sent \d+/);

    const messages = await readStream(stream);
    expect(messages.length).toBe(s.stored);
    const ids = new Set(messages.map((m) => m.msgId));
    expect(ids.size).toBe(messages.length);
    let invalid = 0;
    const deliveries = new Set<string>();
    for (const m of messages) {
      const parsed = parseEvent(m.data);
      if (!parsed.ok) {
        invalid++;
        continue;
      }
      // On its partition's subject (the default 4 partitions), keyed by delivery; Msg-Id = event_id.
      expect(m.subject).toBe(eventSubject(`${root}.delivery.events`, parsed.event.delivery_id, 4));
      expect(m.msgId).toBe(parsed.event.event_id);
      deliveries.add(parsed.event.delivery_id);
    }
    expect(invalid).toBe(s.invalid);
    expect(deliveries.size).toBe(s.deliveries);
    // nats-server 2.10+ places events itself: the simulator publishes the delivery subject there, as the
    // producer contract says (docs/producers.md); on 2.9 it computes the partition.
    await nats.nc.flush();
    delivery.unsubscribe();
    partition.unsubscribe();
    const [major = 0, minor = 0] = (nats.nc.info?.version ?? '0.0').split('.').map(Number);
    const brokerPlaces = major > 2 || (major === 2 && minor >= 10);
    expect(s.placement).toBe(brokerPlaces ? 'broker' : 'producer');
    expect(published).toEqual(
      brokerPlaces ? { delivery: s.sent, partition: 0 } : { delivery: 0, partition: s.sent },
    );
  }, 15_000);

  it('at a high rate without --deliveries: more deliveries at a 4 s GPS, the target rate right after a short ramp', async () => {
    const { stream, args } = unique();
    const { code, out } = await runCliToExit([
      'simulate',
      '--rate',
      '1000',
      '--duration',
      '5',
      '--ramp-s',
      '1',
      '--sub-second',
      '--progress-s',
      '0',
      '--json',
      ...args,
    ]);
    expect({ code, out }).toMatchObject({ code: 0 });
    const s = lastJsonLine(out);
    console.log(`simulate 1000/s: ${JSON.stringify(s)}`);
    expect(s).toMatchObject({ concurrent_deliveries: 4000, gps_interval_ms: 4000, ramp_s: 1, failed: 0 });
    // Every delivery starts within the ramp: 4,000 picked_up events, then ~1,000 GPS/s. The pacer never skips,
    // so the run may end late on a loaded machine but still sends every record due within its 5 s.
    expect(s.deliveries).toBe(4000);
    expect(s.sent).toBeGreaterThanOrEqual(4000 + 0.9 * 1000 * 4);
    expect(s.sent).toBeLessThanOrEqual(4000 + 1.1 * 1000 * 5);
    expect(s.puback_ms).not.toBeNull();
    expect(s.puback_ms!.p50).toBeLessThanOrEqual(s.puback_ms!.p99);
    // Bounded generator: it never held more than a fraction of a second of records (GPS spread over the second).
    expect(s.generator_max_pending).toBeLessThan(1000);
    const info = await nats.jsm.streams.info(stream);
    expect(info.state.messages).toBe(s.stored);
    // Event times carry milliseconds (--sub-second).
    const [first] = await readStream(stream);
    expect(new TextDecoder().decode(first!.data)).toMatch(/"event_time":"[^"]+\.\d{3}Z"/);
  }, 20_000);

  it.each([
    ['SIGINT', true],
    ['SIGTERM', false],
  ] as const)(
    'stops cleanly on %s and still prints the summary (JSON: %s)',
    async (signal, json) => {
      const { stream, args } = unique();
      const child = runCli([
        'simulate',
        '--rate',
        '20',
        '--deliveries',
        '20',
        '--duration',
        '60',
        ...(json ? ['--json'] : []),
        ...args,
      ]);
      let out = '';
      child.stdout!.on('data', (chunk: Buffer) => (out += chunk.toString()));
      child.stderr!.on('data', (chunk: Buffer) => (out += chunk.toString()));
      const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
      const deadline = Date.now() + 8000;
      while (!out.includes('simulate t=') && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 50));
      child.kill(signal);
      const code = await exited;
      expect({ code, out }).toMatchObject({ code: 0 });
      const stored = (await nats.jsm.streams.info(stream)).state.messages;
      if (json) {
        const s = lastJsonLine(out);
        expect(s.stopped).toBe(signal);
        expect(s.elapsed_s).toBeLessThan(10);
        expect(stored).toBe(s.stored);
      } else {
        expect(out).toMatch(new RegExp(`simulate: stopped by ${signal} after [\\d.]+ s`));
        expect(out).toMatch(new RegExp(`broker duplicates 0 \\(stored ${stored}\\), failed 0`));
      }
    },
    15_000,
  );

  it('refuses bad options before any I/O, naming the option', async () => {
    const base = ['simulate', '--nats', 'nats://127.0.0.1:1'];
    const cases: Array<[string[], RegExp]> = [
      [['--rate', '0', '--deliveries', '5', '--duration', '1'], /--rate must be a number > 0/],
      [['--deliveries', '5', '--duration', '1'], /--rate is required/],
      [['--rate', '5', '--deliveries', '0', '--duration', '1'], /--deliveries must be an integer >= 1/],
      [
        ['--rate', '5', '--deliveries', '5', '--duration', '-1'],
        /--duration must be a number of seconds > 0/,
      ],
      [['--rate', '5', '--deliveries', '5', '--duration', 'x'], /--duration must be a number \(got x\)/],
      [
        ['--rate', '5', '--deliveries', '5', '--duration', '1', '--duplicates', '1'],
        /--duplicates must be a fraction in \[0, 1\)/,
      ],
      [
        ['--rate', '5', '--deliveries', '5', '--duration', '1', '--too-late', '-0.1'],
        /--too-late must be a fraction/,
      ],
      [['--rate', '5', '--deliveries', '5', '--duration', '1', '--disorder-s', '-2'], /--disorder-s must be/],
      [['--rate', '5', '--duration', '1', '--ramp-s', '-1'], /--ramp-s must be a number of seconds >= 0/],
      [['--rate', '50', '--deliveries', '5', '--duration', '1'], /--rate 50 needs --deliveries >= 50/],
      [['--rate', '5', '--deliveries', '5', '--duration', '1', '--subject-root', 'a.*'], /--subject-root/],
      [['--rate', '5', '--deliveries', '5', '--duration', '1', '--events-stream', 'a.b'], /--events-stream/],
    ];
    const results = await Promise.all(cases.map(([args]) => runCliToExit([...base, ...args])));
    results.forEach((r, i) => {
      expect({ args: cases[i]![0], code: r.code }).toEqual({ args: cases[i]![0], code: 2 });
      expect(r.out).toMatch(cases[i]![1]);
      // Options are checked first: no connection was attempted.
      expect(r.out).not.toMatch(/not reachable/);
    });
  }, 15_000);

  it('refuses a stream of that name that does not capture the events subjects (never rewrites it)', async () => {
    const { stream, args } = unique();
    await nats.jsm.streams.add({ name: stream, subjects: [`${stream}.other.>`] });
    const r = await runCliToExit([
      'simulate',
      '--rate',
      '5',
      '--deliveries',
      '5',
      '--duration',
      '1',
      ...args,
    ]);
    expect(r.code).toBe(1);
    expect(r.out).toMatch(new RegExp(`stream ${stream} exists without subjects .*\\[stream_mismatch\\]`));
    const info = await nats.jsm.streams.info(stream);
    expect(info.config.subjects).toEqual([`${stream}.other.>`]);
    expect(info.state.messages).toBe(0);
  }, 15_000);

  it('exits non-zero with a clear message when NATS is unreachable', async () => {
    const r = await runCliToExit([
      'simulate',
      '--rate',
      '5',
      '--deliveries',
      '5',
      '--duration',
      '1',
      '--nats',
      'nats://127.0.0.1:1',
    ]);
    expect(r.code).toBe(1);
    expect(r.out).toMatch(/simulate: NATS is not reachable at nats:\/\/127\.0\.0\.1:1/);
  }, 15_000);
});
