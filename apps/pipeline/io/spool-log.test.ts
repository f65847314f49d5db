/** The side-output spool's file format: what a file holds pending, whatever a crash left at its end. */
import {
  doneLine,
  putLine,
  readSpool,
  recordBytes,
  type SpoolRecord,
  spoolFileName,
  spoolFilePid,
} from './spool-log';

const letter = (msgId: string, data: string | Uint8Array = `{"reason":"${msgId}"}`): SpoolRecord => ({
  msgId,
  subject: 'delivery.dlq',
  data,
  kind: 'invalid',
  at: 1_700_000_000_000,
});

describe('spool log', () => {
  it('pending is every put without a later done, in spool order; a repeated put keeps the first', () => {
    const text = [
      putLine(letter('dlq:E:1')),
      putLine(letter('dlq:E:2')),
      putLine({ ...letter('late:ev-9'), subject: 'delivery.late.d1', kind: 'late' }),
      doneLine('dlq:E:1'),
      putLine(letter('dlq:E:2', 'a later copy')),
    ].join('');
    const read = readSpool(text);
    expect([...read.pending.keys()]).toEqual(['dlq:E:2', 'late:ev-9']);
    expect(read.pending.get('dlq:E:2')!.data).toBe('{"reason":"dlq:E:2"}');
    expect(read.pending.get('late:ev-9')).toMatchObject({ subject: 'delivery.late.d1', kind: 'late' });
    expect(read.tornTail).toBe(false);
    expect(read.unreadable).toBe(0);
  });

  it('bytes survive as bytes (base64 in the file), strings as strings', () => {
    const bytes = new Uint8Array([0, 0xff, 0x80, 10, 13]);
    const read = readSpool(putLine(letter('b', bytes)) + putLine(letter('s', 'line\nbreak ✓')));
    expect(Buffer.from(read.pending.get('b')!.data as Uint8Array)).toEqual(Buffer.from(bytes));
    expect(read.pending.get('s')!.data).toBe('line\nbreak ✓');
    expect(recordBytes({ data: 'line\nbreak ✓' })).toBe(14);
    expect(recordBytes({ data: bytes })).toBe(5);
  });

  it('a line torn by a crash is dropped (its put was never reported durable); garbage lines are counted', () => {
    const whole = putLine(letter('dlq:E:1'));
    const torn = putLine(letter('dlq:E:2')).slice(0, 20);
    const read = readSpool(`${whole}{"op":"put"}\nnot json\n${torn}`);
    expect([...read.pending.keys()]).toEqual(['dlq:E:1']);
    expect(read.tornTail).toBe(true);
    expect(read.unreadable).toBe(2);
    expect(readSpool('').pending.size).toBe(0);
  });

  it('a file name carries its writer pid', () => {
    expect(spoolFilePid(spoolFileName(4242, 'a1b2c3d4'))).toBe(4242);
    expect(spoolFilePid('4242-a1b2.spool.tmp')).toBeNull();
    expect(spoolFilePid('x-a1b2.spool')).toBeNull();
    expect(spoolFilePid('4242-a1b2.spool.adopting-abc')).toBeNull();
  });
});
