/**
 * The side-output spool's file format, as pure functions (spool.ts does the I/O). One JSON object per line,
 * appended: `put` stores a side output the broker refused (its subject, data and Msg-Id), `done` says one
 * landed. What is pending is every put without a later done. A kill -9 can tear only the last line, whose
 * put was never reported durable (its source message was not acked): it is dropped on read.
 */

/** What a spooled side output is: a dead letter's kind (its metric label), or a late record. */
export type SpoolKind = 'invalid' | 'processor_error' | 'max_deliver' | 'late';

const KINDS: ReadonlySet<string> = new Set<SpoolKind>(['invalid', 'processor_error', 'max_deliver', 'late']);

export interface SpoolRecord {
  msgId: string;
  subject: string;
  /** The effect's data as the sink would have published it (already cut to max_payload). */
  data: string | Uint8Array;
  kind: SpoolKind;
  /** When it was spooled (ms since epoch). */
  at: number;
}

/** Bytes a record counts against the spool's bound: its data (subjects and ids are small). */
export function recordBytes(record: Pick<SpoolRecord, 'data'>): number {
  return typeof record.data === 'string' ? Buffer.byteLength(record.data) : record.data.length;
}

export function putLine(record: SpoolRecord): string {
  const { msgId, subject, data, kind, at } = record;
  const body = typeof data === 'string' ? { data } : { data_base64: Buffer.from(data).toString('base64') };
  return `${JSON.stringify({ op: 'put', msgId, subject, kind, at, ...body })}\n`;
}

export function doneLine(msgId: string): string {
  return `${JSON.stringify({ op: 'done', msgId })}\n`;
}

export interface SpoolContents {
  /** Pending records in the order they were spooled. */
  pending: Map<string, SpoolRecord>;
  /** The last line had no newline (a write cut by a crash): dropped. */
  tornTail: boolean;
  /** Complete lines that did not read as a record (counted, skipped). */
  unreadable: number;
}

function parseRecord(line: string): SpoolRecord | { op: 'done'; msgId: string } | null {
  let v: Record<string, unknown>;
  try {
    v = JSON.parse(line);
  } catch {
    return null;
  }
  if (typeof v !== 'object' || v === null || typeof v.msgId !== 'string' || v.msgId === '') return null;
  if (v.op === 'done') return { op: 'done', msgId: v.msgId };
  if (v.op !== 'put' || typeof v.subject !== 'string' || v.subject === '') return null;
  if (typeof v.kind !== 'string' || !KINDS.has(v.kind) || typeof v.at !== 'number') return null;
  let data: string | Uint8Array;
  if (typeof v.data === 'string') data = v.data;
  else if (typeof v.data_base64 === 'string') data = new Uint8Array(Buffer.from(v.data_base64, 'base64'));
  else return null;
  return { msgId: v.msgId, subject: v.subject, data, kind: v.kind as SpoolKind, at: v.at };
}

/** What a spool file holds pending. A put of a Msg-Id already pending keeps the first (the same effect). */
export function readSpool(text: string): SpoolContents {
  const pending = new Map<string, SpoolRecord>();
  let unreadable = 0;
  const lines = text.split('\n');
  // split leaves '' after a final newline; anything else there is a torn write.
  const tail = lines.pop() ?? '';
  for (const line of lines) {
    if (line === '') continue;
    const r = parseRecord(line);
    if (r === null) unreadable++;
    else if ('op' in r) pending.delete(r.msgId);
    else if (!pending.has(r.msgId)) pending.set(r.msgId, r);
  }
  return { pending, tornTail: tail !== '', unreadable };
}

/** A spool file's name: `<pid>-<tag>.spool`, one per process (the pid says whether its writer is alive). */
export function spoolFileName(pid: number, tag: string): string {
  return `${pid}-${tag}.spool`;
}

export function spoolFilePid(name: string): number | null {
  const m = /^(\d{1,10})-[A-Za-z0-9]{1,32}\.spool$/.exec(name);
  return m ? Number(m[1]) : null;
}
