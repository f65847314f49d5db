/** The side-output spool on a real directory: durable puts, replay with backoff, the bound, dead writers' files. */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { SideOutputSpool } from './spool';
import { putLine, readSpool, type SpoolRecord, spoolFileName } from './spool-log';

const logger = pino({ level: 'silent' });
let dir: string;
const opened: SideOutputSpool[] = [];

beforeEach(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'spool-test-'));
});
afterEach(async () => {
  await Promise.all(opened.splice(0).map((s) => s.close()));
  rmSync(dir, { recursive: true, force: true });
});

async function openSpool(
  publish: (r: SpoolRecord) => Promise<void>,
  over: { maxBytes?: number; onReplayed?: (r: SpoolRecord) => void } = {},
) {
  const spool = await SideOutputSpool.open({
    dir,
    maxBytes: over.maxBytes ?? 1 << 20,
    logger,
    publish,
    retryBaseMs: 20,
    retryMaxMs: 40,
    ...(over.onReplayed ? { onReplayed: over.onReplayed } : {}),
  });
  opened.push(spool);
  return spool;
}

async function until(what: string, check: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** The pid of a process that has exited: a writer that is gone. */
function deadPid(): number {
  const pid = spawnSync('true').pid;
  if (!pid) throw new Error('no pid');
  return pid;
}

const spoolFiles = () => readdirSync(dir).filter((n) => n.endsWith('.spool'));

describe('SideOutputSpool', () => {
  it('a put is on disk when it resolves, is replayed under its Msg-Id until the broker takes it, then retired', async () => {
    let refuse = 3;
    const published: string[] = [];
    const replayed: string[] = [];
    const spool = await openSpool(
      async (r) => {
        if (refuse-- > 0) throw new Error('503 no responders');
        published.push(`${r.subject} ${r.msgId} ${r.data}`);
      },
      { onReplayed: (r) => replayed.push(r.msgId) },
    );
    spool.start();
    expect(await spool.put('dlq:E:7', 'delivery.dlq', '{"reason":"x"}', 'invalid')).toBe(true);
    // Durable before anything lands: the file already holds it.
    const [file] = spoolFiles();
    expect([...readSpool(readFileSync(path.join(dir, file!), 'utf8')).pending.keys()]).toContain('dlq:E:7');
    // The same Msg-Id again (a redelivery) is not a second record.
    expect(await spool.put('dlq:E:7', 'delivery.dlq', '{"reason":"x"}', 'invalid')).toBe(true);
    expect(spool.stats().records).toBe(1);
    await until('replayed', () => published.length === 1);
    expect(published).toEqual(['delivery.dlq dlq:E:7 {"reason":"x"}']);
    expect(replayed).toEqual(['dlq:E:7']);
    await until('retired', () => spool.stats().records === 0 && spool.stats().lastError === null);
    expect(spool.stats()).toMatchObject({ records: 0, bytes: 0, full: false, lastError: null });
    // Nothing pending: the file was started over.
    await until('file emptied', () => readFileSync(path.join(dir, file!), 'utf8') === '');
  });

  it('full: a put beyond maxBytes is refused and said; landing brings room back', async () => {
    let open = false;
    const spool = await openSpool(
      async () => {
        if (!open) throw new Error('storage full');
      },
      { maxBytes: 100 },
    );
    spool.start();
    expect(await spool.put('a', 'delivery.dlq', 'x'.repeat(60), 'invalid')).toBe(true);
    expect(await spool.put('b', 'delivery.dlq', 'y'.repeat(60), 'invalid')).toBe(false);
    expect(spool.stats()).toMatchObject({ records: 1, bytes: 60, full: true });
    open = true;
    await until('drained', () => spool.stats().records === 0);
    expect(spool.stats().full).toBe(false);
    expect(await spool.put('b', 'delivery.dlq', 'y'.repeat(60), 'invalid')).toBe(true);
  });

  it('landed(): the sink published it itself, the replay does not send it again', async () => {
    const published: string[] = [];
    let open = false;
    const spool = await openSpool(async (r) => {
      if (!open) throw new Error('no responders');
      published.push(r.msgId);
    });
    spool.start();
    await spool.put('a', 'delivery.dlq', 'A', 'invalid');
    await spool.put('b', 'delivery.late.d1', 'B', 'late');
    spool.landed('a');
    open = true;
    await until('b replayed', () => published.length === 1);
    await new Promise((r) => setTimeout(r, 100));
    expect(published).toEqual(['b']);
  });

  it("a dead writer's file is taken over whole (torn tail dropped) and replayed; a live writer's is left", async () => {
    const gone = spoolFileName(deadPid(), 'deadbeef');
    const lines =
      putLine({ msgId: 'dlq:E:1', subject: 'delivery.dlq', data: 'one', kind: 'invalid', at: 1 }) +
      putLine({
        msgId: 'late:e2',
        subject: 'delivery.late.d',
        data: new Uint8Array([1, 2]),
        kind: 'late',
        at: 2,
      }) +
      '{"op":"put","msgId":"torn';
    writeFileSync(path.join(dir, gone), lines);
    // The parent of this test (alive) wrote this one: not ours to take.
    const live = spoolFileName(process.ppid, 'cafe0001');
    writeFileSync(
      path.join(dir, live),
      putLine({ msgId: 'x', subject: 's', data: 'x', kind: 'invalid', at: 3 }),
    );
    const published: Array<[string, string]> = [];
    const spool = await openSpool(async (r) => {
      published.push([r.msgId, Buffer.from(r.data).toString('hex')]);
    });
    expect(spool.stats().records).toBe(2);
    expect(spoolFiles()).not.toContain(gone);
    expect(spoolFiles()).toContain(live);
    spool.start();
    await until('both replayed', () => published.length === 2);
    expect(published).toEqual([
      ['dlq:E:1', Buffer.from('one').toString('hex')],
      ['late:e2', '0102'],
    ]);
  });

  it('what is pending at close stays for the next process; an empty spool leaves no file, nor its directory', async () => {
    const first = await openSpool(async () => {
      throw new Error('no responders');
    });
    await first.put('dlq:E:9', 'delivery.dlq', 'nine', 'invalid');
    await first.close();
    expect(spoolFiles()).toHaveLength(1);
    const published: string[] = [];
    // Same pid, but no longer open in this process: taken over like a dead writer's.
    const second = await openSpool(async (r) => {
      published.push(r.msgId);
    });
    second.start();
    await until('replayed by the next one', () => published.length === 1);
    await until('retired', () => second.stats().records === 0);
    await second.close();
    expect(existsSync(dir)).toBe(false);
  });

  it('a directory it cannot write refuses the start with the setting named', async () => {
    const file = path.join(dir, 'not-a-dir');
    writeFileSync(file, '');
    await expect(
      SideOutputSpool.open({
        dir: path.join(file, 'spool'),
        maxBytes: 1 << 20,
        logger,
        publish: async () => {},
      }),
    ).rejects.toMatchObject({ code: 'invalid_options', message: expect.stringMatching(/^spool\.dir /) });
  });
});
