import type { Cidr, IpBytes } from './ip';
import { cidrContains, formatIp, parseCidrList, parseIp } from './ip';

/** A client key taken from a header is cut to this many characters (it keys a bounded table). */
const MAX_KEY_TEXT = 64;
/** Hops walked from the right end of X-Forwarded-For: more proxies than this in a chain is not a chain. */
const MAX_HOPS = 32;

/**
 * Who a request comes from, behind reverse proxies. Only a peer inside the trusted prefixes may speak for
 * someone else: its X-Forwarded-For is walked from the right (the hop each trusted proxy appended), trusted
 * proxies are skipped, and the first hop that is not one is the client. Hops left of it were written by the
 * client and are never read, so a client-set first hop cannot pick its own rate-limit key.
 */
export class ProxyTrust {
  private constructor(
    private readonly cidrs: readonly Cidr[],
    /** Legacy trustForwardedFor: any peer is the one proxy (no hop is trusted). */
    private readonly anyPeerTrusted: boolean,
  ) {}

  /** Trusts no one: the client is always the socket's peer. */
  static none(): ProxyTrust {
    return new ProxyTrust([], false);
  }

  /** The legacy `trustForwardedFor`: the peer is a proxy, and the hop it appended (the rightmost) is the client. */
  static anyPeer(): ProxyTrust {
    return new ProxyTrust([], true);
  }

  static of(cidrs: readonly Cidr[]): ProxyTrust {
    return new ProxyTrust(cidrs, false);
  }

  /** From canonical list text (validated by libs/config); throws on an invalid entry. */
  static fromText(text: string): ProxyTrust {
    const parsed = parseCidrList(text);
    if (!parsed.ok) throw new RangeError(`not an IP prefix: "${parsed.entry}"`);
    return new ProxyTrust(parsed.cidrs, false);
  }

  get trustsAnyone(): boolean {
    return this.anyPeerTrusted || this.cidrs.length > 0;
  }

  trusts(address: string): boolean {
    const bytes = parseIp(address);
    return bytes !== undefined && this.trustsBytes(bytes);
  }

  private trustsBytes(bytes: IpBytes): boolean {
    for (const cidr of this.cidrs) if (cidrContains(cidr, bytes)) return true;
    return false;
  }

  /**
   * The client's address (canonical text) for a socket peer and the X-Forwarded-For header ('' when absent).
   * An unparsable hop right of the trusted proxies is returned as written (cut): it is not a proxy we trust,
   * so it is whoever the last trusted proxy says the client is.
   */
  clientAddress(peer: string, forwardedFor: string): string {
    const peerBytes = parseIp(peer);
    const peerText = peerBytes === undefined ? peer.slice(0, MAX_KEY_TEXT) : formatIp(peerBytes);
    if (forwardedFor === '' || !this.trustsAnyone) return peerText;
    if (!this.anyPeerTrusted && (peerBytes === undefined || !this.trustsBytes(peerBytes))) return peerText;
    let end = forwardedFor.length;
    let leftmostTrusted: string | undefined;
    for (let hops = 0; hops < MAX_HOPS && end > 0; hops++) {
      const comma = forwardedFor.lastIndexOf(',', end - 1);
      const hop = forwardedFor.slice(comma + 1, end).trim();
      end = Math.max(comma, 0);
      if (hop === '') continue;
      const bytes = parseIp(hop);
      if (bytes === undefined) return hop.slice(0, MAX_KEY_TEXT);
      const text = formatIp(bytes);
      if (this.anyPeerTrusted || !this.trustsBytes(bytes)) return text;
      leftmostTrusted = text;
    }
    return leftmostTrusted ?? peerText;
  }
}
