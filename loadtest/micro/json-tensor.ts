/**
 * Micro-benchmark of the gateway's per-request work for the bench model's request (256 float32): decode,
 * bind to the signature, encode the ring record. JSON through the general path (JSON.parse), JSON through
 * the scanner, and a binary frame; then the answer (256 float32) as JSON text — the earlier way (an array of
 * numbers through JSON.stringify, 17-digit doubles) and written from the record (float32 printed shortest) —
 * and as a binary frame, for scale. `node dist/loadtest/micro/json-tensor.js [ms per case]`
 */
import * as v8 from 'node:v8';
import {
  bindBinaryRequest,
  bindRequest,
  decodeBinaryRequest,
  decodeJsonRequest,
  decodeRequest,
  decodeResult,
  encodeBinaryAnswer,
  encodeBinaryRequest,
  encodeResultHead,
  encodeResultRecord,
  encodeResultWithHead,
  type InferenceRequest,
  parseSignature,
  RESPONSE_HEADER_BYTES,
  requestRecordBytes,
  writeOutputSectionHeader,
  writeRequestRecord,
  writeResponseHeader,
} from '../../libs/protocol';

const signature = parseSignature(
  {
    inputs: [{ name: 'features', dtype: 'float32', shape: [256] }],
    outputs: [{ name: 'scores', dtype: 'float32', shape: [256] }],
  },
  'bench',
);
const limits = { maxElements: 1 << 20 };
const header = { requestId: 1, slot: 1, priority: 'normal' as const, enqueuedAt: 0, deadlineAt: 1 };
const ring = new Uint8Array(1 << 16);
const view = new DataView(ring.buffer);

// The load generator's bodies: 4-decimal floats in [-1, 1].
let seed = 0xbe4c;
const rand = (): number => {
  seed = (seed * 1103515245 + 12345) & 0x7fffffff;
  return seed / 0x7fffffff;
};
const inputs = Array.from({ length: 8 }, () =>
  Array.from({ length: 256 }, () => Math.round((rand() * 2 - 1) * 1e4) / 1e4),
);
const texts = inputs.map((input, id) => JSON.stringify({ id, model: 'bench', input }));
const utf8 = new TextEncoder();
const frames = texts.map((text) => utf8.encode(text));
const binaries = inputs.map((input, id) => {
  const frame = encodeBinaryRequest({ id, model: 'bench' }, [
    { name: 'features', dtype: 'float32', dims: [256], data: Float32Array.from(input) },
  ]);
  return frame.buffer.slice(frame.byteOffset, frame.byteOffset + frame.byteLength) as ArrayBuffer;
});
const decoder = new TextDecoder();

function record(request: InferenceRequest, bound: ReturnType<typeof bindRequest>): void {
  if (requestRecordBytes(bound) > ring.length || request.priority !== 'normal') throw new Error('bench');
  writeRequestRecord(view, ring, 0, header, bound);
}

// One response record of 256 float32 scores, as a worker writes it.
const answerRing = new Uint8Array(4096);
const answerView = new DataView(answerRing.buffer);
writeResponseHeader(
  answerView,
  0,
  { requestId: 1, slot: 1, queueMs: 1, computeMs: 1, batchSize: 1, workerIndex: 0 },
  0,
  1,
);
const scoresAt = writeOutputSectionHeader(answerView, RESPONSE_HEADER_BYTES, 0, [256], 1024);
for (let i = 0; i < 256; i++) answerView.setFloat32(scoresAt + 4 * i, rand() * 2 - 1, true);
const head = encodeResultHead('bench', '1', 1);
const fields = { id: 1, model: 'bench', version: '1', epoch: 1, latency_ms: 12.345 };

const cases: Array<[string, (i: number) => void]> = [
  [
    'json, general path (JSON.parse)',
    (i) => {
      const request = decodeRequest(texts[i & 7]!);
      record(request, bindRequest(request, signature, limits));
    },
  ],
  [
    'json, scanner',
    (i) => {
      const request = decodeJsonRequest(texts[i & 7]!);
      record(request, bindRequest(request, signature, limits));
    },
  ],
  [
    'json, scanner, from frame bytes (WS)',
    (i) => {
      const request = decodeJsonRequest(decoder.decode(frames[i & 7]!));
      record(request, bindRequest(request, signature, limits));
    },
  ],
  [
    'binary frame',
    (i) => {
      const request = decodeBinaryRequest(binaries[i & 7]!);
      record(request, bindBinaryRequest(request, signature, limits));
    },
  ],
  [
    'answer, json (decodeResult + JSON.stringify: before)',
    (i) => {
      const result = decodeResult(answerRing, answerView, 0, signature);
      if (encodeResultWithHead(i, head, result, 12.345).length < 256) throw new Error('bench');
    },
  ],
  [
    'answer, json (from the record, float32 shortest)',
    (i) => {
      if (encodeResultRecord(i, head, answerRing, answerView, 0, signature, 12.345).length < 256)
        throw new Error('bench');
    },
  ],
  [
    'answer, binary frame',
    () => {
      if (encodeBinaryAnswer(answerRing, answerView, 0, signature, fields).length < 1024)
        throw new Error('bench');
    },
  ],
];

/** Bytes allocated per op: new-space growth over short stretches without a scavenge (median). */
function allocationPerOp(run: (i: number) => void): number {
  const samples: number[] = [];
  for (let round = 0; round < 30; round++) {
    const before = newSpaceUsed();
    for (let i = 0; i < 100; i++) run(i);
    const grown = newSpaceUsed() - before;
    if (grown > 0) samples.push(grown / 100);
  }
  samples.sort((a, b) => a - b);
  return samples[Math.floor(samples.length / 2)] ?? 0;
}

function newSpaceUsed(): number {
  return v8.getHeapSpaceStatistics().find((space) => space.space_name === 'new_space')?.space_used_size ?? 0;
}

const budgetMs = Number(process.argv[2] ?? 1000);
for (const [name, run] of cases) {
  for (let i = 0; i < 20_000; i++) run(i);
  // CPU time, not wall time: on a shared host it is what the gateway thread pays
  let ops = 0;
  const started = performance.now();
  const cpu = process.cpuUsage();
  while (performance.now() - started < budgetMs) {
    for (let i = 0; i < 500; i++) run(ops++);
  }
  const used = process.cpuUsage(cpu);
  const perSecond = ops / ((used.user + used.system) / 1e6);
  const bytes = allocationPerOp(run);
  console.log(
    `${name.padEnd(50)} ${Math.round(perSecond).toLocaleString('en').padStart(10)} ops/s of CPU  ` +
      `${(1e6 / perSecond).toFixed(2).padStart(6)} µs/op  ~${Math.round(bytes)} B allocated/op`,
  );
}
