import type { StreamEvent } from './types';

/** A buffered event and its estimated size, kept so that removal subtracts exactly what insertion added. */
export interface Entry<P> {
  readonly event: StreamEvent<P>;
  readonly bytes: number;
}

/** Event-time order; the id breaks ties so the order never depends on arrival. */
export function compareEvents(a: StreamEvent<unknown>, b: StreamEvent<unknown>): number {
  return a.eventTime - b.eventTime || (a.eventId < b.eventId ? -1 : a.eventId > b.eventId ? 1 : 0);
}

/** First index whose event time is >= t. */
export function lowerBound<P>(entries: readonly Entry<P>[], t: number): number {
  let lo = 0;
  let hi = entries.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (entries[mid]!.event.eventTime < t) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Inserts in (eventTime, eventId) order; in-order arrival appends. */
export function insertSorted<P>(entries: Entry<P>[], entry: Entry<P>): void {
  let i = entries.length;
  while (i > 0 && compareEvents(entries[i - 1]!.event, entry.event) > 0) i--;
  entries.splice(i, 0, entry);
}

/** Events with start <= eventTime < end, in order. */
export function eventsIn<P>(entries: readonly Entry<P>[], start: number, end: number): StreamEvent<P>[] {
  const from = lowerBound(entries, start);
  const to = lowerBound(entries, end);
  const out: StreamEvent<P>[] = [];
  for (let i = from; i < to; i++) out.push(entries[i]!.event);
  return out;
}

const ENTRY_OVERHEAD_BYTES = 96;

/** Rough heap size of an event: UTF-16 strings plus the payload's JSON size, plus object overhead. */
export function estimateEventBytes(event: StreamEvent<unknown>): number {
  const payload = event.payload === undefined ? 0 : (JSON.stringify(event.payload)?.length ?? 0);
  return (
    ENTRY_OVERHEAD_BYTES + 2 * (event.key.length + event.eventId.length + event.partition.length + payload)
  );
}
