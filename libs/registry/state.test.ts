import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { loadState, type RegistryState, type StateFs, saveState, statePath } from './state';

function tempDir(): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'streaminfer-state-test-'));
}

const state: RegistryState = {
  defaultModel: 'upper',
  configuredDefaultModel: 'echo',
  models: {
    digits: { stable: '2', candidate: '1', previousStable: '1', canaryPercent: 10, shadow: true },
    upper: { stable: '1', canaryPercent: 0, shadow: false },
  },
};

test('round trip keeps aliases, canary, shadow and the default model', () => {
  const dir = tempDir();
  saveState(dir, state);
  expect(loadState(dir)).toEqual({ state });
  // No temporary file is left beside it.
  expect(fs.readdirSync(dir)).toEqual(['registry.json']);
});

test('a file written before the default model was persisted still loads, without a default model', () => {
  const dir = tempDir();
  fs.writeFileSync(
    statePath(dir),
    JSON.stringify({
      format: 1,
      savedAt: '2026-11-01T00:00:00.000Z',
      models: { digits: { stable: '1', canaryPercent: 0, shadow: false } },
    }),
  );
  const loaded = loadState(dir);
  expect(loaded.warning).toBeUndefined();
  expect(loaded.state).toEqual({ models: { digits: { stable: '1', canaryPercent: 0, shadow: false } } });
  expect(loaded.state?.defaultModel).toBeUndefined();
});

test('saveState fsyncs the file, then the directory after the rename', () => {
  const dir = tempDir();
  const calls: string[] = [];
  const fds = new Map<number, string>();
  const spy: StateFs = {
    mkdirSync: fs.mkdirSync,
    openSync: (file, flags) => {
      const fd = fs.openSync(file, flags);
      fds.set(fd, String(file));
      calls.push(`open ${path.basename(String(file))}`);
      return fd;
    },
    writeSync: fs.writeSync,
    fsyncSync: (fd) => {
      calls.push(`fsync ${path.basename(fds.get(fd) ?? '?')}`);
      fs.fsyncSync(fd);
    },
    closeSync: fs.closeSync,
    renameSync: (from, to) => {
      calls.push(`rename -> ${path.basename(String(to))}`);
      fs.renameSync(from, to);
    },
  };
  saveState(dir, state, spy);
  const tmp = `registry.json.${process.pid}.tmp`;
  expect(calls).toEqual([
    `open ${tmp}`,
    `fsync ${tmp}`,
    'rename -> registry.json',
    `open ${path.basename(dir)}`,
    `fsync ${path.basename(dir)}`,
  ]);
  expect(loadState(dir).state).toEqual(state);
});

test('a corrupt file is reported and ignored', () => {
  const dir = tempDir();
  fs.writeFileSync(statePath(dir), '{"format": 1, "models": ');
  const loaded = loadState(dir);
  expect(loaded.state).toBeUndefined();
  expect(loaded.warning).toContain('corrupt');
});
