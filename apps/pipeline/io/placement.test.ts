/**
 * Where an event belongs: the partition of a delivery id is FNV-1a (32 bit) of the id's UTF-8 bytes mod the
 * partition count — what nats-server's `partition(n, …)` subject transform computes and what a Go, Python or
 * Java producer gets from its own FNV-1a over the subject token's bytes.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { eventSubject, fnv1a32, partitionOfKey } from './layout';

/** id, its UTF-8 bytes, FNV-1a 32 (hex), partition of 4, of 8: the rows of docs/producers.md. */
const VECTORS: Array<[string, string, string, number, number]> = [
  ['a', '61', 'e40c292c', 0, 4],
  ['d1', '6431', '881d13e6', 2, 6],
  ['order-482', '6f726465722d343832', '6c0d1c10', 0, 0],
  ['delivery-000017', '64656c69766572792d303030303137', 'a8920444', 0, 4],
  ['dé', '64c3a9', '29d7f63b', 3, 3],
  ['Müller_7', '4dc3bc6c6c65725f37', '2bc79eaa', 2, 2],
  ['配達-0042', 'e9858de981942d30303432', '4205ec25', 1, 5],
  ['🚚-1', 'f09f9a9a2d31', 'eebf29c6', 2, 6],
  ['ORD_ß', '4f52445fc39f', 'e9f84e0f', 3, 7],
];

/** The reference: FNV-1a over bytes, as every other language writes it. */
function fnvBytes(bytes: Uint8Array): number {
  let h = 0x811c9dc5;
  for (const b of bytes) h = Math.imul(h ^ b, 0x01000193);
  return h >>> 0;
}

/** Ids a producer may use: ASCII, Latin-1, CJK, astral (surrogate pairs), mixed. */
function sampleIds(n: number): string[] {
  const pools = ['abcXYZ019_-', 'éüßøñÅ', '配達注文東京', '🚚📦🛵', 'αβγδ', 'абв'];
  let seed = 7;
  const next = () => {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
    return seed;
  };
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    let id = '';
    const len = 1 + (next() % 12);
    for (let j = 0; j < len; j++) {
      const pool = [...pools[next() % pools.length]!];
      id += pool[next() % pool.length];
    }
    out.push(id);
  }
  return out;
}

describe('partition placement', () => {
  test.each(VECTORS)('%s → bytes %s, FNV-1a %s, partition %i of 4, %i of 8', (id, hex, fnv, p4, p8) => {
    expect(Buffer.from(id, 'utf8').toString('hex')).toBe(hex);
    expect(fnv1a32(id).toString(16).padStart(8, '0')).toBe(fnv);
    expect(partitionOfKey(id, 4)).toBe(p4);
    expect(partitionOfKey(id, 8)).toBe(p8);
    expect(eventSubject('delivery.events', id, 8)).toBe(`delivery.events.${p8}.${id}`);
  });

  test('is FNV-1a over the UTF-8 bytes for every id (lone surrogates as U+FFFD, as encoders write them)', () => {
    for (const id of [...sampleIds(2000), 'x\ud800y', '\udc00', 'a\ud83d']) {
      expect(fnv1a32(id)).toBe(fnvBytes(new TextEncoder().encode(id)));
    }
  });

  test('a Python producer hashing the UTF-8 bytes places every id where the pipeline reads it', () => {
    const ids = [...VECTORS.map((v) => v[0]), ...sampleIds(500)];
    // What the docs tell a Python producer to write (docs/producers.md), fed the ids as JSON.
    const python = [
      'import json, sys',
      'def partition_of(delivery_id, partitions):',
      '    h = 0x811C9DC5',
      "    for b in delivery_id.encode('utf-8'):",
      '        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF',
      '    return h % partitions',
      'ids = json.load(sys.stdin)',
      'print(json.dumps([[partition_of(i, 4), partition_of(i, 8), partition_of(i, 1024)] for i in ids]))',
    ].join('\n');
    const out = execFileSync('python3', ['-c', python], { input: JSON.stringify(ids), encoding: 'utf8' });
    const theirs = JSON.parse(out) as number[][];
    const ours = ids.map((id) => [partitionOfKey(id, 4), partitionOfKey(id, 8), partitionOfKey(id, 1024)]);
    const disagree = ids.filter((_, i) => JSON.stringify(theirs[i]) !== JSON.stringify(ours[i]));
    expect(disagree).toEqual([]);
  });

  test('the test vectors in docs/producers.md are these', () => {
    const doc = readFileSync(path.join(__dirname, '..', '..', '..', '..', 'docs', 'producers.md'), 'utf8');
    const rows = doc
      .split('\n')
      .filter((l) => /^\| `[^`]+` +\| `[0-9a-f ]+`/.test(l))
      .map((l) => {
        const cells = l
          .split('|')
          .slice(1, -1)
          .map((c) => c.trim().replace(/`/g, ''));
        return [cells[0], cells[1]!.replace(/ /g, ''), cells[2], Number(cells[3]), Number(cells[4])];
      });
    expect(rows).toEqual(VECTORS);
  });
});
