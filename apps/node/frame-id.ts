/**
 * The id of a frame we will not decode (rate-limited or oversize), read straight from its first bytes: no
 * text decoding, no JSON parse, at most SNIFF_BYTES looked at. Best effort: an id that is not a plain number
 * or an escape-free string in that window is null, and the client gets an id-less answer.
 */
import type { RequestId } from '../../libs/protocol';

const SNIFF_BYTES = 256;
/** Binary frames: u8 magic · u8 version · u16 header length · JSON header. */
const BINARY_HEADER_AT = 4;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COLON = 0x3a;
const utf8 = new TextDecoder('utf-8');

function isSpace(byte: number): boolean {
  return byte === 0x20 || byte === 0x09 || byte === 0x0a || byte === 0x0d;
}

/** The id in a JSON text frame or a binary frame's JSON header; null when it cannot be read cheaply. */
export function sniffFrameId(message: ArrayBuffer, isBinary: boolean): RequestId {
  const from = isBinary ? BINARY_HEADER_AT : 0;
  const end = Math.min(message.byteLength, from + SNIFF_BYTES);
  if (end <= from) return null;
  const bytes = new Uint8Array(message, 0, end);
  // Find `"id"` followed by optional spaces and a colon.
  for (let i = from; i + 3 < end; i++) {
    if (bytes[i] !== QUOTE || bytes[i + 1] !== 0x69 || bytes[i + 2] !== 0x64 || bytes[i + 3] !== QUOTE)
      continue;
    let at = i + 4;
    while (at < end && isSpace(bytes[at]!)) at++;
    if (bytes[at] !== COLON) continue;
    at++;
    while (at < end && isSpace(bytes[at]!)) at++;
    return valueAt(bytes, at, end);
  }
  return null;
}

function valueAt(bytes: Uint8Array, at: number, end: number): RequestId {
  if (at >= end) return null;
  if (bytes[at] === QUOTE) {
    for (let close = at + 1; close < end; close++) {
      const byte = bytes[close]!;
      if (byte === BACKSLASH) return null;
      if (byte === QUOTE) return utf8.decode(bytes.subarray(at + 1, close));
    }
    return null;
  }
  // A JSON number: optional minus, digits, fraction, exponent.
  let close = at;
  while (close < end) {
    const byte = bytes[close]!;
    const numeric =
      (byte >= 0x30 && byte <= 0x39) ||
      byte === 0x2d ||
      byte === 0x2b ||
      byte === 0x2e ||
      byte === 0x65 ||
      byte === 0x45;
    if (!numeric) break;
    close++;
  }
  if (close === at || close === end) return null;
  let value = 0;
  // Plain non-negative integers (the common id) without building a string.
  let plain = true;
  for (let i = at; i < close; i++) {
    const byte = bytes[i]!;
    if (byte < 0x30 || byte > 0x39) {
      plain = false;
      break;
    }
    value = value * 10 + (byte - 0x30);
  }
  if (plain && Number.isSafeInteger(value)) return value;
  const parsed = Number(utf8.decode(bytes.subarray(at, close)));
  return Number.isFinite(parsed) ? parsed : null;
}
