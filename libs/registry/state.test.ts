import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { ProtocolError } from '../protocol';
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
    unlinkSync: fs.unlinkSync,
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

/** The real file calls, with an errno thrown where `fail` says (what a full disk or a read-only one does). */
function failing(fail: Partial<Record<'writeSync' | 'fsyncSync' | 'renameSync', string>>): StateFs {
  const raise = (call: string, code: string): never => {
    const error = new Error(`${code}: simulated, ${call}`) as NodeJS.ErrnoException;
    error.code = code;
    throw error;
  };
  return {
    mkdirSync: fs.mkdirSync,
    openSync: fs.openSync,
    writeSync: ((...args: Parameters<typeof fs.writeSync>) =>
      fail.writeSync ? raise('write', fail.writeSync) : fs.writeSync(...args)) as typeof fs.writeSync,
    fsyncSync: (fd) => (fail.fsyncSync ? raise('fsync', fail.fsyncSync) : fs.fsyncSync(fd)),
    closeSync: fs.closeSync,
    renameSync: (from, to) => (fail.renameSync ? raise('rename', fail.renameSync) : fs.renameSync(from, to)),
    unlinkSync: fs.unlinkSync,
  };
}

test.each([
  ['write', { writeSync: 'ENOSPC' }, 'storage_full'],
  ['fsync', { fsyncSync: 'EDQUOT' }, 'storage_full'],
  ['rename', { renameSync: 'EIO' }, 'persist_failed'],
  ['write', { writeSync: 'EROFS' }, 'persist_failed'],
] as const)(
  'a failed %s (%j) throws %s naming the file, removes the temporary file, keeps the old state',
  (_call, fail, code) => {
    const dir = tempDir();
    const before: RegistryState = { models: { digits: { stable: '1', canaryPercent: 0, shadow: false } } };
    saveState(dir, before);
    let thrown: unknown;
    try {
      saveState(dir, state, failing(fail));
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(ProtocolError);
    expect(thrown).toMatchObject({ code });
    expect((thrown as Error).message).toContain(statePath(dir));
    expect(fs.readdirSync(dir)).toEqual(['registry.json']);
    expect(loadState(dir).state).toEqual(before);
  },
);
