import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseReload } from './admin';
import { DEFAULT_PIPELINE_CONFIG, resolvePipelineConfig, spoolDir } from './config';
import { PipelineConfigError } from './errors';
import { pipelineExecArgv } from './supervise';

const repo = join(__dirname, '..', '..', '..');

function refused(over: unknown): PipelineConfigError {
  try {
    resolvePipelineConfig(over);
  } catch (err) {
    if (err instanceof PipelineConfigError) return err;
    throw err;
  }
  throw new Error(`accepted ${JSON.stringify(over)}`);
}

describe('pipeline config', () => {
  test('the shipped deploy/pipeline.json is valid and spells out the defaults', () => {
    const shipped = JSON.parse(readFileSync(join(repo, 'deploy', 'pipeline.json'), 'utf8'));
    expect(resolvePipelineConfig(shipped)).toEqual(DEFAULT_PIPELINE_CONFIG);
  });

  test('replicas: 1 by default, 1 to 5 accepted, anything else refused naming the key', () => {
    expect(resolvePipelineConfig({}).replicas).toBe(1);
    expect(resolvePipelineConfig({ replicas: 3 }).replicas).toBe(3);
    for (const bad of [0, 6, 2.5, '3']) expect(refused({ replicas: bad }).message).toMatch(/^replicas/);
  });

  test('maxEventBytes: 64 KiB by default, 512 B to 8 MiB accepted', () => {
    expect(resolvePipelineConfig({}).maxEventBytes).toBe(65_536);
    for (const ok of [512, 4096, 8 * 1024 * 1024])
      expect(resolvePipelineConfig({ maxEventBytes: ok }).maxEventBytes).toBe(ok);
  });

  test("spool: on by default in the state directory's spool, 256 MiB; 1 MiB to 1 TiB", () => {
    const defaults = resolvePipelineConfig({});
    expect(defaults.spool).toEqual({ enabled: true, dir: '', maxBytes: 268_435_456 });
    expect(spoolDir(defaults, {})).toBe('./.state/spool');
    expect(spoolDir(defaults, { STREAMINFER_STATE_DIR: '/var/lib/streaminfer/' })).toBe(
      '/var/lib/streaminfer/spool',
    );
    expect(spoolDir(resolvePipelineConfig({ spool: { dir: '/srv/spool' } }), {})).toBe('/srv/spool');
    expect(resolvePipelineConfig({ spool: { maxBytes: 1_048_576 } }).spool.maxBytes).toBe(1_048_576);
    for (const bad of [1_048_575, 2 ** 40 + 1, 1.5])
      expect(refused({ spool: { maxBytes: bad } }).message).toMatch(/^spool\.maxBytes/);
    expect(refused({ spool: { dir: ' ' } }).message).toMatch(/^spool\.dir: must be a directory/);
    expect(resolvePipelineConfig({ spool: { enabled: false } }).spool.enabled).toBe(false);
    expect(refused({ spool: { enabled: 'yes' } }).message).toMatch(/^spool\.enabled/);
    expect(refused({ spool: { path: '/x' } }).message).toMatch(/^spool\.path: unknown setting/);
  });

  test('runtime.semiSpaceMb: 64 by default, given to the pipeline process unless the operator set the flag', () => {
    const defaults = resolvePipelineConfig({});
    expect(defaults.runtime).toEqual({ semiSpaceMb: 64 });
    expect(pipelineExecArgv(defaults, ['--enable-source-maps'], {})).toEqual([
      '--enable-source-maps',
      '--max-semi-space-size=64',
    ]);
    expect(pipelineExecArgv(resolvePipelineConfig({ runtime: { semiSpaceMb: 0 } }), [], {})).toEqual([]);
    expect(pipelineExecArgv(defaults, ['--max-semi-space-size=8'], {})).toEqual(['--max-semi-space-size=8']);
    expect(pipelineExecArgv(defaults, [], { NODE_OPTIONS: '--max-semi-space-size=32 --trace-gc' })).toEqual(
      [],
    );
    for (const bad of [-1, 1025, 1.5])
      expect(refused({ runtime: { semiSpaceMb: bad } }).message).toMatch(/^runtime\.semiSpaceMb/);
  });

  test('eventTime admission bounds: 5 min skew and 3,650 days by default; too small refused naming the key', () => {
    expect(resolvePipelineConfig({}).eventTime).toMatchObject({
      maxClockSkewMs: 300_000,
      maxEventAgeMs: 315_360_000_000,
    });
    expect(refused({ eventTime: { maxClockSkewMs: 999 } }).message).toMatch(
      /^eventTime\.maxClockSkewMs: must be at least 1000/,
    );
    // An event that could still be on time (70 s behind with the defaults) is never refused as too old.
    expect(refused({ eventTime: { maxEventAgeMs: 69_999 } }).message).toMatch(
      /^eventTime\.maxEventAgeMs: must be at least 70000/,
    );
    expect(refused({ eventTime: { maxClockSkewMs: '5m' } }).message).toMatch(/^eventTime\.maxClockSkewMs/);
  });

  test('later overrides win, nested objects merge', () => {
    const c = resolvePipelineConfig(
      { inference: { mode: 'external' } },
      { inference: { url: 'ws://h:1/ws' }, nats: 'nats://x:1' },
    );
    expect(c.inference).toMatchObject({ mode: 'external', url: 'ws://h:1/ws', modelsDir: './models' });
    expect(c.nats).toEqual({ servers: 'nats://x:1' });
  });

  test('nats: the string form sets the servers; a later URL (--nats) keeps the identity and TLS', () => {
    const file = {
      nats: { servers: 'nats://a:1', user: 'pipeline', passwordFile: '/run/pw', tls: { ca: '/etc/ca.pem' } },
    };
    expect(resolvePipelineConfig(file, { nats: 'tls://b:2,tls://c:3' }).nats).toEqual({
      servers: 'tls://b:2,tls://c:3',
      user: 'pipeline',
      passwordFile: '/run/pw',
      tls: { ca: '/etc/ca.pem' },
    });
    expect(resolvePipelineConfig({ nats: 'nats://x:1' }).nats).toEqual({ servers: 'nats://x:1' });
  });

  test('a refused server list is shown without its credentials', () => {
    const err = refused({ nats: 'nats://u:hunter2@a:1 b' });
    expect(err.path).toBe('nats.servers');
    expect(err.message).not.toContain('hunter2');
    expect(err.message).toContain('<redacted>@');
  });

  test.each([
    [{ bogus: 1 }, 'bogus'],
    [{ consumer: { maxAckPending: 'many' } }, 'consumer.maxAckPending'],
    [{ consumer: { batchSize: 60_000 } }, 'consumer.batchSize'],
    [{ concurrency: 100_000 }, 'concurrency'],
    [{ consumer: { maxDeliver: 1 } }, 'consumer.maxDeliver'],
    [{ eventTime: { stateTtlMs: 60_000 } }, 'eventTime.stateTtlMs'],
    [{ eventTime: { dedupeTtlMs: 1.5 } }, 'eventTime.dedupeTtlMs'],
    [{ inference: { mode: 'magic' } }, 'inference.mode'],
    [{ inference: { mode: 'external', url: 'http://x' } }, 'inference.url'],
    [{ alertThreshold: 1.2 }, 'alertThreshold'],
    [{ maxEventBytes: 100 }, 'maxEventBytes'],
    [{ maxEventBytes: 9 * 1024 * 1024 }, 'maxEventBytes'],
    [{ maxEventBytes: 4096.5 }, 'maxEventBytes'],
    [{ maxEventBytes: '4096' }, 'maxEventBytes'],
    [{ nats: 'localhost:4222' }, 'nats.servers'],
    [{ nats: { servers: 'nats://a:1', password: 'inline' } }, 'nats.password'],
    [{ nats: { servers: 'nats://a:1', tls: { handshakeFirst: 'yes' } } }, 'nats.tls.handshakeFirst'],
    [{ subjectRoot: 'a..b' }, 'subjectRoot'],
    [{ streams: { events: 'has space' } }, 'streams.events'],
    [{ model: { version: '../1' } }, 'model.version'],
    [{ logLevel: 'loud' }, 'logLevel'],
    [{ instance: { maxStallMs: 10_000 } }, 'instance.maxStallMs'],
    [{ instance: { leaseTtlMs: 70_000 } }, 'instance.maxStallMs'],
    [{ instance: { maxStallMs: 6e4 + 0.5 } }, 'instance.maxStallMs'],
    [[], '$'],
  ])('%j is refused at %s', (over, path) => {
    expect(refused(over).path).toBe(path);
  });
});

describe('POST /api/reload body', () => {
  test('model and version are names; at least the version', () => {
    expect(parseReload({ version: '2' })).toEqual({ version: '2' });
    expect(parseReload({ model: 'delay-risk', version: '2', strategy: 'atomic' })).toEqual({
      model: 'delay-risk',
      version: '2',
    });
    for (const bad of [
      null,
      [],
      'x',
      {},
      { version: 2 },
      { version: '../x' },
      { strategy: 'rolling', version: '2' },
      { extra: 1 },
    ])
      expect(typeof parseReload(bad)).toBe('string');
  });
});
