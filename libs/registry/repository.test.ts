import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { RepositoryError, scanRepository, scanRepositoryDetailed } from './index';
import { compareVersions } from './repository';

const SHIPPED = path.resolve(__dirname, '../../../models');

function repo(models: Record<string, { config: unknown; versions: string[] }>): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'repo-'));
  for (const [name, model] of Object.entries(models)) {
    mkdirSync(path.join(dir, name));
    writeFileSync(
      path.join(dir, name, 'config.json'),
      typeof model.config === 'string' ? model.config : JSON.stringify(model.config),
    );
    for (const version of model.versions) {
      mkdirSync(path.join(dir, name, version));
      writeFileSync(path.join(dir, name, version, 'model.onnx'), 'x');
    }
  }
  return dir;
}

const good = {
  inputs: [{ name: 'x', dtype: 'float32', shape: [4] }],
  outputs: [{ name: 'y', dtype: 'float32', shape: [2] }],
};

test('the shipped repository scans cleanly', () => {
  const names = scanRepository(SHIPPED).map((model) => model.name);
  expect(names).toEqual(expect.arrayContaining(['echo', 'upper']));
});

test('versions sort numerically and the default is the highest unless configured', () => {
  const [model] = scanRepository(repo({ m: { config: good, versions: ['2', '10', '1'] } }));
  expect(model!.versions.map((v) => v.version)).toEqual(['1', '2', '10']);
  expect(model!.defaultVersion).toBe('10');
  const [pinned] = scanRepository(
    repo({ m: { config: { ...good, default_version: '2' }, versions: ['1', '2', '3'] } }),
  );
  expect(pinned!.defaultVersion).toBe('2');
});

test.each([
  ['broken JSON', '{', /config.json/],
  ['no inputs', { outputs: good.outputs }, /inputs/],
  ['name mismatch', { ...good, name: 'other' }, /directory/],
  ['bad batching', { ...good, batching: { max_batch_size: 0 } }, /max_batch_size/],
  ['bad policy', { ...good, batching: { policy: 'fast' } }, /policy/],
  ['zero objective', { ...good, batching: { slo_p99_ms: 0 } }, /batching\.slo_p99_ms must be/],
  ['string objective', { ...good, batching: { slo_p99_ms: '50' } }, /batching\.slo_p99_ms must be/],
  ['huge objective', { ...good, batching: { slo_p99_ms: 3_600_001 } }, /slo_p99_ms/],
  [
    'bad objective, older name',
    { ...good, batching: { latency_slo_ms: -1 } },
    /batching\.latency_slo_ms must be/,
  ],
  ['both objective names', { ...good, batching: { slo_p99_ms: 50, latency_slo_ms: 50 } }, /give one/],
  ['missing default version', { ...good, default_version: '7' }, /default_version/],
])('%s is refused with the file named', (_name, config, pattern) => {
  expect(() => scanRepository(repo({ m: { config, versions: ['1'] } }))).toThrow(pattern);
  expect(() => scanRepository(repo({ m: { config, versions: ['1'] } }))).toThrow(RepositoryError);
});

test('the objective: slo_p99_ms, or latency_slo_ms by its older name', () => {
  const read = (batching: object) =>
    scanRepository(repo({ m: { config: { ...good, batching }, versions: ['1'] } }))[0]!.batching;
  expect(read({ slo_p99_ms: 120 })).toEqual({ sloP99Ms: 120 });
  expect(read({ latency_slo_ms: 40.5, policy: 'adaptive' })).toEqual({ sloP99Ms: 40.5, policy: 'adaptive' });
  expect(read({ max_batch_size: 8 }).sloP99Ms).toBeUndefined();
});

test('a model without versions, or an empty repository, is refused', () => {
  expect(() => scanRepository(repo({ m: { config: good, versions: [] } }))).toThrow(/no version/);
  expect(() => scanRepository(repo({}))).toThrow(/holds no model/);
  expect(() => scanRepository('/nonexistent/dir')).toThrow(/not a directory/);
});

test('compareVersions', () => {
  expect(['b', '10', '2', 'a', '1'].sort(compareVersions)).toEqual(['1', '2', '10', 'a', 'b']);
});

test('the detailed scan reads what it can and names each model it cannot', () => {
  const dir = repo({ bad: { config: '{ nope', versions: ['1'] }, m: { config: good, versions: ['1'] } });
  const scan = scanRepositoryDetailed(dir);
  expect(scan.models.map((model) => model.name)).toEqual(['m']);
  expect(scan.broken).toEqual([
    { name: 'bad', dir: path.join(dir, 'bad'), reason: expect.stringContaining('bad/config.json') },
  ]);
  expect(() => scanRepository(dir)).toThrow(/bad\/config\.json/);
});

test('a pull cache adds versions and models; its file wins for a version in both, config.json does not', () => {
  const dir = repo({ m: { config: good, versions: ['1', '2'] } });
  const cache = repo({
    m: { config: { ...good, description: 'pulled' }, versions: ['2', '3'] },
    p: { config: good, versions: ['1'] },
  });
  const models = scanRepository(dir, cache);
  expect(models.map((model) => model.name)).toEqual(['m', 'p']);
  const m = models[0]!;
  expect(m.description).toBe('');
  expect(m.versions).toEqual([
    { version: '1', file: path.join(dir, 'm', '1', 'model.onnx') },
    { version: '2', file: path.join(cache, 'm', '2', 'model.onnx') },
    { version: '3', file: path.join(cache, 'm', '3', 'model.onnx') },
  ]);
  expect(models[1]!.dir).toBe(path.join(cache, 'p'));
  // A cache that does not exist yet (nothing pulled) is no error.
  expect(scanRepository(dir, path.join(dir, 'no-cache')).map((model) => model.name)).toEqual(['m']);
});
