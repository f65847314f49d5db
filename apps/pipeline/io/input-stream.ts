/**
 * The input stream captures exactly what the partitions consume, so nothing a producer publishes under the
 * events prefix is stored and then never read: `<events>.<k>.<delivery_id>` for each k < partitions (the
 * partition subjects) and, where the broker can place events (nats-server 2.10+ stream subject transforms),
 * `<events>.<delivery_id>` (the delivery subject), which the broker stores as
 * `<events>.{{partition(P,1)}}.<delivery_id>` — FNV-1a of the id's bytes mod P, the same as partitionOfKey.
 * Any other subject under the prefix (a partition number ≥ P, `p1`, `01`, an extra token, and the delivery
 * subject on 2.9) matches no stream: the producer's publish fails at once instead of getting a PubAck.
 *
 * On 2.9 there is no transform, and the pipeline does not republish (that would store every event twice and
 * give it a second position): producers there publish to the partition subject (eventSubject).
 */
import { PipelineIoError } from '../errors';
import type { StreamLayout, StreamSpec } from './layout';

/** nats-server 2.10 added stream subject transforms with `partition()`. */
export function brokerPlacesEvents(serverVersion: string | undefined): boolean {
  const m = /^v?(\d+)\.(\d+)/.exec(serverVersion ?? '');
  if (!m) return false;
  const major = Number(m[1]);
  return major > 2 || (major === 2 && Number(m[2]) >= 10);
}

/** What the broker stores a delivery subject as. */
export function placementTransform(eventsPrefix: string, partitions: number): { src: string; dest: string } {
  return { src: `${eventsPrefix}.*`, dest: `${eventsPrefix}.{{partition(${partitions},1)}}.{{wildcard(1)}}` };
}

/** The input stream as this pipeline needs it: `layout.events` with the subjects the partitions consume. */
export function inputStreamSpec(layout: StreamLayout, partitions: number, brokerPlaces: boolean): StreamSpec {
  const prefix = layout.subjects.eventsPrefix;
  const subjects = Array.from({ length: partitions }, (_, k) => `${prefix}.${k}.*`);
  return {
    ...layout.events,
    subjects: brokerPlaces ? [`${prefix}.*`, ...subjects] : subjects,
    ...(brokerPlaces ? { subjectTransform: placementTransform(prefix, partitions) } : {}),
    exclusive: { prefix, partitions },
  };
}

/** Two subject patterns share a subject (`*` one token, `>` one or more at the end). */
export function subjectsOverlap(a: string, b: string): boolean {
  const x = a.split('.');
  const y = b.split('.');
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    const p = x[i];
    const q = y[i];
    if (p === '>' || q === '>') return p !== undefined && q !== undefined;
    if (p === undefined || q === undefined) return false;
    if (p !== '*' && q !== '*' && p !== q) return false;
  }
  return true;
}

/** The partition count an input stream was made for (from its `<prefix>.<k>.*` subjects), or null. */
export function partitionsOfSubjects(subjects: string[], prefix: string): number | null {
  const ks = new Set<number>();
  for (const s of subjects) {
    const m = s.startsWith(`${prefix}.`) ? /^(0|[1-9]\d*)\.\*$/.exec(s.slice(prefix.length + 1)) : null;
    if (m) ks.add(Number(m[1]));
  }
  if (ks.size === 0) return null;
  const n = Math.max(...ks) + 1;
  return ks.size === n ? n : null;
}

export interface InputStreamCheck {
  /** Our subjects the stream lacks, and its subjects under the prefix that no partition consumes. */
  missing: string[];
  strays: string[];
  transformDiffers: boolean;
  /** The stream may be brought to the spec: all it captures is under the prefix, for the same count. */
  updatable: boolean;
  /** Why it may not be, for the error. */
  refusal?: string;
}

/**
 * Compares an existing input stream with the spec. It is ours to update when everything it captures lies
 * under the events prefix (the contract's namespace) and it was not made for another partition count (that
 * would move deliveries between partitions mid-stream): the pre-1 layout `<prefix>.>`, or the 2.9 layout on a
 * broker upgraded to 2.10+.
 */
export function checkInputStream(
  spec: StreamSpec,
  existing: { subjects?: string[]; subject_transform?: { src?: string; dest?: string } | null },
): InputStreamCheck {
  const ex = spec.exclusive;
  if (!ex) throw new PipelineIoError('invalid_options', `stream ${spec.name} is not an input stream`);
  const have = existing.subjects ?? [];
  const want = new Set(spec.subjects);
  const namespace = `${ex.prefix}.>`;
  const missing = spec.subjects.filter((s) => !have.includes(s));
  const strays = have.filter((s) => !want.has(s) && subjectsOverlap(s, namespace));
  const t = existing.subject_transform;
  const transformDiffers = spec.subjectTransform
    ? t?.src !== spec.subjectTransform.src || t?.dest !== spec.subjectTransform.dest
    : Boolean(t?.src && subjectsOverlap(t.src, namespace));
  const outside = have.filter((s) => !s.startsWith(`${ex.prefix}.`));
  const madeFor = partitionsOfSubjects(have, ex.prefix);
  let refusal: string | undefined;
  if (outside.length > 0) refusal = `it also captures ${outside.join(', ')}`;
  else if (madeFor !== null && madeFor !== ex.partitions)
    refusal =
      `it was made for ${madeFor} partitions and the pipeline has ${ex.partitions} (the count is fixed for ` +
      `the life of a stream: changing it moves deliveries between partitions; use a new stream or set ` +
      `partitions to ${madeFor})`;
  return {
    missing,
    strays,
    transformDiffers,
    updatable: refusal === undefined,
    ...(refusal ? { refusal } : {}),
  };
}
