/**
 * The worker's defence in depth: a request record that does not match the lane (a short int64
 * tensor, a string prefix that leaves its section) is taken but never copied, set aside to be answered
 * `internal` alone, and the rest of the batch is copied exactly.
 */
import {
  bindRequest,
  decodeRequest,
  findInputSection,
  type ModelSignature,
  parseSignature,
  RECORD_PROBLEMS,
  requestRecordBytes,
  sectionDataOffset,
  writeRequestRecord,
} from '../../libs/protocol';
import { RingBuffer } from '../../libs/ring';
import { BatchBuffers } from './batch';

const ids: ModelSignature = parseSignature(
  {
    inputs: [{ name: 'ids', dtype: 'int64', shape: [4] }],
    outputs: [{ name: 'out', dtype: 'int64', shape: [4] }],
  },
  'ids',
);
const echo: ModelSignature = parseSignature(
  {
    inputs: [
      { name: 'input', dtype: 'float32', shape: [-1], optional: true },
      { name: 'text', dtype: 'string', shape: [], optional: true },
    ],
    outputs: [
      { name: 'output', dtype: 'float32', shape: [-1], from: 'input' },
      { name: 'text_out', dtype: 'string', shape: [], from: 'text' },
    ],
  },
  'echo',
);
const limits = { maxElements: 1 << 16 };

/** Writes a JSON request's record into the ring; `forge` may then rewrite it (and return its new length). */
function put(
  ring: RingBuffer,
  signature: ModelSignature,
  requestId: number,
  json: string,
  forge?: (view: DataView, offset: number, length: number) => number,
): void {
  const bound = bindRequest(decodeRequest(json), signature, limits);
  const length = requestRecordBytes(bound);
  const offset = ring.reserve(length);
  const header = { requestId, slot: 0, priority: 'normal' as const, enqueuedAt: 0, deadlineAt: 1e12 };
  writeRequestRecord(ring.view, ring.bytes, offset, header, bound);
  ring.commit(forge ? forge(ring.view, offset, length) : length);
}

test('a short int64 record is set aside; its batch-mates are copied exactly', () => {
  const ring = RingBuffer.create(1 << 16);
  put(ring, ids, 1, '{"input":[1,2,3,4]}');
  // 16 bytes where int64 [4] needs 32: the record as a decoder bug would have written it
  put(ring, ids, 2, '{"input":[-1,-1,-1,-1]}', (view, offset, length) => {
    view.setUint32(offset + 24, 16, true);
    return length - 16;
  });
  put(ring, ids, 3, '{"input":[5,6,7,8]}');
  const buffers = new BatchBuffers(ids, 8);
  buffers.begin(0);
  expect(buffers.claimMore(ring, 8)).toBe(3);
  expect(buffers.count).toBe(2);
  expect(Array.from(buffers.requestIds.subarray(0, 2))).toEqual([1, 3]);
  expect(buffers.invalidCount).toBe(1);
  expect(buffers.invalidIds[0]).toBe(2);
  expect(RECORD_PROBLEMS[buffers.invalidProblems[0]!]).toMatch(/byte length/);
  const bytes = buffers.numericBytes(0);
  expect(Array.from(new BigInt64Array(bytes.slice().buffer))).toEqual([1n, 2n, 3n, 4n, 5n, 6n, 7n, 8n]);
});

test('a short int64 record first in its batch sets nothing for the next ones', () => {
  const ring = RingBuffer.create(1 << 16);
  put(ring, ids, 1, '{"input":[-1,-1,-1,-1]}', (view, offset, length) => {
    view.setUint32(offset + 24, 16, true);
    return length - 16;
  });
  put(ring, ids, 2, '{"input":[9,10,11,12]}');
  const buffers = new BatchBuffers(ids, 8);
  buffers.begin(0);
  expect(buffers.claimMore(ring, 8)).toBe(2);
  expect([buffers.count, buffers.invalidCount]).toEqual([1, 1]);
  expect(Array.from(new BigInt64Array(buffers.numericBytes(0).slice().buffer))).toEqual([9n, 10n, 11n, 12n]);
});

test('a string prefix that leaves its record is never read: nothing past the record reaches the batch', () => {
  const ring = RingBuffer.create(1 << 16);
  put(ring, echo, 1, '{"text":"first"}');
  put(ring, echo, 2, '{"text":"abcd"}', (view, offset, length) => {
    const section = findInputSection(view, offset, length, 1);
    view.setUint32(sectionDataOffset(view, section), 1000, true);
    return length;
  });
  put(ring, echo, 3, `{"text":"${'x'.repeat(200)}"}`);
  const buffers = new BatchBuffers(echo, 8);
  buffers.begin(0);
  expect(buffers.claimMore(ring, 8)).toBe(3);
  expect(buffers.count).toBe(2);
  expect(buffers.strings[1]).toEqual(['first', 'x'.repeat(200)]);
  expect(buffers.invalidIds[0]).toBe(2);
  expect(RECORD_PROBLEMS[buffers.invalidProblems[0]!]).toMatch(/string lengths/);
});
