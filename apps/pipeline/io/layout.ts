/**
 * The streams of the public contract and where each subject is stored.
 *
 * Msg-Id dedupe only works on subjects a stream captures, and nothing the pipeline emits may be lost, so
 * every output subject lives in a stream:
 *   DELIVERY_EVENTS       delivery.events.>                        the input log
 *   DELIVERY_PREDICTIONS  delivery.predictions.>, delivery.alerts.>  the decisions (one dedupe window per
 *                        delivery.epochs                          decision id, one log to replay) and the
 *                                                                 model-version transitions between epochs
 *   DELIVERY_SIDE         delivery.late.>, delivery.dlq            events the pipeline did not predict on
 * Consumers read alerts alone with a filter subject on DELIVERY_PREDICTIONS.
 */
import { requirePositiveInt } from '../../../libs/config';
import { invalidOptions, PipelineIoError, requireName } from '../errors';

export interface StreamSpec {
  name: string;
  subjects: string[];
  /** Broker dedupe window for Msg-Id. */
  duplicateWindowMs: number;
  /** 0 keeps messages until the limits below are hit. */
  maxAgeMs: number;
  maxBytes: number;
  /** Where the broker stores what it captures under `src` (nats-server 2.10+). */
  subjectTransform?: { src: string; dest: string };
  /**
   * The input stream: everything it captures under `prefix` must be one of `subjects` (consumed by the
   * `partitions`), else it is stored and never read (input-stream.ts).
   */
  exclusive?: { prefix: string; partitions: number };
}

export interface SubjectLayout {
  /** Input subjects are `${eventsPrefix}.<delivery_id>`. */
  eventsPrefix: string;
  predictionsPrefix: string;
  alertsPrefix: string;
  latePrefix: string;
  deadLetterSubject: string;
  /** Each epoch transition (model version pinned from then on) is recorded here. */
  epochsSubject: string;
}

export interface StreamLayout {
  subjects: SubjectLayout;
  events: StreamSpec;
  predictions: StreamSpec;
  side: StreamSpec;
}

export const DEFAULT_DUPLICATE_WINDOW_MS = 2 * 60_000;

export interface LayoutOptions {
  eventsStream?: string;
  predictionsStream?: string;
  sideStream?: string;
  /** Prepended to every subject (`<prefix>.delivery.events.>`), so tests and tenants never collide. */
  subjectRoot?: string;
  duplicateWindowMs?: number;
  maxAgeMs?: number;
  maxBytes?: number;
}

export function streamLayout(options: LayoutOptions = {}): StreamLayout {
  const root =
    options.subjectRoot === undefined || options.subjectRoot === '' ? '' : `${options.subjectRoot}.`;
  if (root !== '' && !/^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*\.$/.test(root)) {
    throw new PipelineIoError(
      'invalid_options',
      `subjectRoot must be plain subject tokens (got ${options.subjectRoot})`,
    );
  }
  const duplicateWindowMs = requirePositiveInt(
    'duplicateWindowMs',
    options.duplicateWindowMs ?? DEFAULT_DUPLICATE_WINDOW_MS,
    1000,
    invalidOptions,
  );
  const maxAgeMs = requirePositiveInt('maxAgeMs', options.maxAgeMs ?? 0, 0, invalidOptions);
  const maxBytes = options.maxBytes ?? -1;
  if (!Number.isInteger(maxBytes) || (maxBytes < 1 && maxBytes !== -1)) {
    throw new PipelineIoError(
      'invalid_options',
      `maxBytes must be a positive integer or -1 (got ${maxBytes})`,
    );
  }
  const subjects: SubjectLayout = {
    eventsPrefix: `${root}delivery.events`,
    predictionsPrefix: `${root}delivery.predictions`,
    alertsPrefix: `${root}delivery.alerts`,
    latePrefix: `${root}delivery.late`,
    deadLetterSubject: `${root}delivery.dlq`,
    epochsSubject: `${root}delivery.epochs`,
  };
  const spec = (name: string, subjectList: string[]): StreamSpec => ({
    name,
    subjects: subjectList,
    duplicateWindowMs,
    maxAgeMs,
    maxBytes,
  });
  return {
    subjects,
    events: spec(requireName('eventsStream', options.eventsStream ?? 'DELIVERY_EVENTS'), [
      `${subjects.eventsPrefix}.>`,
    ]),
    predictions: spec(requireName('predictionsStream', options.predictionsStream ?? 'DELIVERY_PREDICTIONS'), [
      `${subjects.predictionsPrefix}.>`,
      `${subjects.alertsPrefix}.>`,
      subjects.epochsSubject,
    ]),
    side: spec(requireName('sideStream', options.sideStream ?? 'DELIVERY_SIDE'), [
      `${subjects.latePrefix}.>`,
      subjects.deadLetterSubject,
    ]),
  };
}

export function layoutStreams(layout: StreamLayout): StreamSpec[] {
  return [layout.events, layout.predictions, layout.side];
}

/**
 * The partition a key belongs to: FNV-1a of the delivery id's UTF-8 bytes, modulo the partition count — what
 * nats-server's `partition(n, …)` subject transform computes, and what a producer in any language gets from
 * the subject token's bytes (docs/producers.md has test vectors). Producers and the pipeline must agree on it
 * (and on the count: changing it moves keys, like Kafka's partition count).
 */
export function partitionOfKey(key: string, partitions: number): number {
  return fnv1a32(key) % partitions;
}

const FNV_OFFSET = 0x811c9dc5;
const FNV_PRIME = 0x01000193;

/**
 * 32-bit FNV-1a of a string's UTF-8 bytes (a lone surrogate counts as U+FFFD, as TextEncoder writes it),
 * encoded on the fly: this runs for every message, so no buffer is made.
 */
export function fnv1a32(text: string): number {
  let h = FNV_OFFSET;
  for (let i = 0; i < text.length; i++) {
    let c = text.charCodeAt(i);
    if (c < 0x80) {
      h = Math.imul(h ^ c, FNV_PRIME);
      continue;
    }
    if (c >= 0xd800 && c <= 0xdfff) {
      const next = i + 1 < text.length ? text.charCodeAt(i + 1) : 0;
      if (c <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
        c = 0x10000 + ((c - 0xd800) << 10) + (next - 0xdc00);
        i++;
      } else c = 0xfffd;
    }
    if (c < 0x800) {
      h = Math.imul(h ^ (0xc0 | (c >> 6)), FNV_PRIME);
    } else if (c < 0x10000) {
      h = Math.imul(h ^ (0xe0 | (c >> 12)), FNV_PRIME);
      h = Math.imul(h ^ (0x80 | ((c >> 6) & 0x3f)), FNV_PRIME);
    } else {
      h = Math.imul(h ^ (0xf0 | (c >> 18)), FNV_PRIME);
      h = Math.imul(h ^ (0x80 | ((c >> 12) & 0x3f)), FNV_PRIME);
      h = Math.imul(h ^ (0x80 | ((c >> 6) & 0x3f)), FNV_PRIME);
    }
    h = Math.imul(h ^ (0x80 | (c & 0x3f)), FNV_PRIME);
  }
  return h >>> 0;
}

/** Where a producer publishes an event: `<eventsPrefix>.<partition>.<delivery_id>`. */
export function eventSubject(eventsPrefix: string, deliveryId: string, partitions: number): string {
  requirePositiveInt('partitions', partitions, 1, invalidOptions);
  return keySubject(`${eventsPrefix}.${partitionOfKey(deliveryId, partitions)}`, deliveryId);
}

/** What one partition's consumer reads. */
export function partitionFilter(eventsPrefix: string, partition: number): string {
  return `${eventsPrefix}.${partition}.*`;
}

/** Subject tokens may not contain dots, spaces or wildcards: a delivery id that does is refused. */
export function keySubject(prefix: string, key: string): string {
  if (key === '' || /[\s.*>]/.test(key)) {
    throw new PipelineIoError('invalid_options', `not a valid subject token: ${JSON.stringify(key)}`);
  }
  return `${prefix}.${key}`;
}
