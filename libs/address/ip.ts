/**
 * IP addresses and CIDR prefixes, pure (no I/O, no DNS). Every address is held as 16 bytes: IPv4 as its
 * IPv4-mapped IPv6 form (::ffff:a.b.c.d), so an IPv4 prefix matches a peer that a dual-stack socket reports
 * as v4-mapped, and never an IPv6 address.
 */

/** 16 bytes, network order. */
export type IpBytes = Uint8Array;

export interface Cidr {
  /** The prefix's first address. */
  readonly bytes: IpBytes;
  /** Prefix length over the 128 bits (an IPv4 /n is 96 + n). */
  readonly bits: number;
  readonly v4: boolean;
}

const V4_MAPPED_PREFIX = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
const DECIMAL_OCTET = /^(?:0|[1-9]\d{0,2})$/;
const HEX_GROUP = /^[0-9a-fA-F]{1,4}$/;
/** Longest text taken as an address: anything longer is not one. */
const MAX_ADDRESS_TEXT = 64;

function parseV4Into(text: string, out: IpBytes, at: number): boolean {
  const parts = text.split('.');
  if (parts.length !== 4) return false;
  for (let i = 0; i < 4; i++) {
    const part = parts[i]!;
    if (!DECIMAL_OCTET.test(part)) return false;
    const value = Number(part);
    if (value > 255) return false;
    out[at + i] = value;
  }
  return true;
}

function parseV6Into(text: string, out: IpBytes): boolean {
  const halves = text.split('::');
  if (halves.length > 2) return false;
  const groupsOf = (half: string): string[] => (half === '' ? [] : half.split(':'));
  const head = groupsOf(halves[0]!);
  const tail = halves.length === 2 ? groupsOf(halves[1]!) : [];
  // An embedded IPv4 address (::ffff:1.2.3.4) takes the last two groups.
  const last = halves.length === 2 ? tail : head;
  let v4Tail = false;
  if (last.length > 0 && last[last.length - 1]!.includes('.')) {
    const dotted = last.pop()!;
    if (!parseV4Into(dotted, out, 12)) return false;
    v4Tail = true;
  }
  const groups = head.length + tail.length + (v4Tail ? 2 : 0);
  if (halves.length === 1 ? groups !== 8 : groups > 7) return false;
  let at = 0;
  for (const group of head) {
    if (!HEX_GROUP.test(group)) return false;
    const value = Number.parseInt(group, 16);
    out[at++] = value >> 8;
    out[at++] = value & 0xff;
  }
  const tailStart = 16 - (v4Tail ? 4 : 0) - tail.length * 2;
  for (let i = at; i < tailStart; i++) out[i] = 0;
  at = tailStart;
  for (const group of tail) {
    if (!HEX_GROUP.test(group)) return false;
    const value = Number.parseInt(group, 16);
    out[at++] = value >> 8;
    out[at++] = value & 0xff;
  }
  return true;
}

/** Parses an IPv4 or IPv6 address (IPv6 optionally in brackets); undefined when it is not one. */
export function parseIp(raw: string): IpBytes | undefined {
  let text = raw.trim();
  if (text.length === 0 || text.length > MAX_ADDRESS_TEXT) return undefined;
  if (text.startsWith('[') && text.endsWith(']')) text = text.slice(1, -1);
  const out = new Uint8Array(16);
  if (!text.includes(':')) {
    for (let i = 0; i < 12; i++) out[i] = V4_MAPPED_PREFIX[i]!;
    return parseV4Into(text, out, 12) ? out : undefined;
  }
  return parseV6Into(text, out) ? out : undefined;
}

export function isV4Mapped(bytes: IpBytes): boolean {
  for (let i = 0; i < 12; i++) if (bytes[i] !== V4_MAPPED_PREFIX[i]) return false;
  return true;
}

/** Canonical text: dotted IPv4 for IPv4 and v4-mapped addresses, RFC 5952 compressed IPv6 otherwise. */
export function formatIp(bytes: IpBytes): string {
  if (isV4Mapped(bytes)) return `${bytes[12]}.${bytes[13]}.${bytes[14]}.${bytes[15]}`;
  const groups: number[] = [];
  for (let i = 0; i < 16; i += 2) groups.push((bytes[i]! << 8) | bytes[i + 1]!);
  // The longest run of two or more zero groups (the first one on a tie) becomes "::".
  let bestStart = -1;
  let bestLength = 1;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLength) {
      bestStart = i;
      bestLength = j - i;
    }
    i = j;
  }
  const hex = groups.map((group) => group.toString(16));
  if (bestStart < 0) return hex.join(':');
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLength).join(':')}`;
}

/** The canonical text of an address, or undefined when it is not one. */
export function canonicalAddress(text: string): string | undefined {
  const bytes = parseIp(text);
  return bytes === undefined ? undefined : formatIp(bytes);
}

/**
 * The key a client's limits are kept under: an IPv4 address itself, an IPv6 address's /64 (one subscriber's
 * network: a host there has 2^64 addresses to rotate through); text that is not an address is its own key.
 */
export function clientKey(address: string): string {
  const bytes = parseIp(address);
  if (bytes === undefined || isV4Mapped(bytes)) return address;
  bytes.fill(0, 8);
  return `${formatIp(bytes)}/64`;
}

/** Parses `address/bits` or a bare address (a single host); undefined when invalid or host bits are set. */
export function parseCidr(raw: string): Cidr | undefined {
  const text = raw.trim();
  const slash = text.indexOf('/');
  const addressText = slash < 0 ? text : text.slice(0, slash);
  const bytes = parseIp(addressText);
  if (bytes === undefined) return undefined;
  // Lengths count over the family as written: /n of dotted IPv4 is /(96 + n) of its mapped form.
  const writtenV4 = !addressText.includes(':');
  const width = writtenV4 ? 32 : 128;
  let length = width;
  if (slash >= 0) {
    const digits = text.slice(slash + 1);
    if (!/^\d{1,3}$/.test(digits)) return undefined;
    length = Number(digits);
    if (length > width) return undefined;
  }
  const bits = writtenV4 ? 96 + length : length;
  if (!matchesPrefix(bytes, bytes, bits, true)) return undefined;
  // A v4-mapped prefix written in IPv6 (::ffff:10.0.0.0/104) is kept as the IPv4 prefix it is.
  return { bytes, bits, v4: isV4Mapped(bytes) && bits >= 96 };
}

/**
 * With `exact`, checks that `address` has no bit set past the prefix (a valid network address); without it,
 * that `address` lies inside the prefix of `network`.
 */
function matchesPrefix(network: IpBytes, address: IpBytes, bits: number, exact = false): boolean {
  for (let i = 0; i < 16; i++) {
    const kept = Math.max(0, Math.min(8, bits - i * 8));
    const mask = kept === 0 ? 0 : (0xff << (8 - kept)) & 0xff;
    if (exact) {
      if ((address[i]! & ~mask & 0xff) !== 0) return false;
    } else if ((address[i]! & mask) !== (network[i]! & mask)) return false;
  }
  return true;
}

export function cidrContains(cidr: Cidr, address: IpBytes): boolean {
  // An IPv4 prefix never matches an IPv6 address, even ::/0-like ones (0.0.0.0/0 is 96 bits of v4 mapping).
  return matchesPrefix(cidr.bytes, address, cidr.bits);
}

export function formatCidr(cidr: Cidr): string {
  return `${formatIp(cidr.bytes)}/${cidr.v4 ? cidr.bits - 96 : cidr.bits}`;
}

export type CidrListResult = { ok: true; cidrs: Cidr[] } | { ok: false; entry: string };

/** A comma-separated list of prefixes (or bare addresses); on failure, the first entry that is not one. */
export function parseCidrList(text: string): CidrListResult {
  const cidrs: Cidr[] = [];
  for (const raw of text.split(',')) {
    const entry = raw.trim();
    const cidr = entry === '' ? undefined : parseCidr(entry);
    if (cidr === undefined) return { ok: false, entry };
    cidrs.push(cidr);
  }
  return { ok: true, cidrs };
}

export function formatCidrList(cidrs: readonly Cidr[]): string {
  return cidrs.map(formatCidr).join(',');
}

/**
 * A host a listener binds to that only this machine reaches: `localhost`, 127.0.0.0/8 (also IPv4-mapped), ::1.
 * Names other than localhost are not resolved: they count as reachable from elsewhere.
 */
export function isLoopbackName(host: string): boolean {
  if (host.trim().toLowerCase() === 'localhost') return true;
  const bytes = parseIp(host);
  if (bytes === undefined) return false;
  if (isV4Mapped(bytes)) return bytes[12] === 127;
  return bytes.every((byte, index) => byte === (index === 15 ? 1 : 0));
}
