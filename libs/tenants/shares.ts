/**
 * A tenant's limits split between the node processes of a host (the supervisor's side; pure, with a clock).
 *
 * Every period (tens of ms) the supervisor gives each node a share of each tenant's rate, burst and connection
 * cap, weighted by the node's recent demand for that tenant (requests that asked for a token, upgrades
 * tried), each node keeping a small floor; nodes answer with their demand since the last share and their open
 * connections. No per-request IPC.
 *
 * The shares never add up to more than the tenant's limits, whatever the delays: the supervisor keeps, for each
 * node, an upper bound of the share the node may be applying (the largest it was sent and has not acknowledged
 * a smaller one since). A node's share is lowered at once; a share is raised only out of what is left when
 * every node's bound is counted, so the share an idle node gives up reaches the busy one a period later, after
 * the idle node said it applied it. With the tokens a node holds capped at its burst share, what every node
 * admits together in any window of T seconds is at most burst + rate × T; the open connections of a tenant
 * never pass its cap (a node at its share refuses the upgrade; its refusal counts as demand, so the share moves).
 */

export interface TenantLimits {
  name: string;
  /** 0 = no tenant rate limit. */
  rateLimitRps: number;
  rateLimitBurst: number;
  /** 0 = no tenant connection cap. */
  maxConnections: number;
}

/** One node's share of one tenant. */
export interface Share {
  rate: number;
  burst: number;
  connections: number;
}

/**
 * What a node says of one tenant, since its previous report: requests that asked for a token, upgrades it
 * refused at its share of the connection cap, and its open connections now.
 */
export interface TenantDemand {
  attempts: number;
  upgrades: number;
  open: number;
}

export interface ShareOptions {
  /** Fraction of each limit every live node keeps, however idle (capped at half the limit over all nodes). */
  floorFraction?: number;
  /** Half-life of the demand estimate (ms). */
  demandHalfLifeMs?: number;
}

interface Sent {
  seq: number;
  share: Share;
}

interface Entry {
  /** Upper bound of the share the node may be applying now. */
  used: Share;
  /** Last share the node acknowledged (zero until then, and when it does not know the tenant). */
  applied: Share;
  unacked: Sent[];
  open: number;
  demandRate: number;
  upgradeRate: number;
}

interface NodeLedger {
  entries: Map<string, Entry>;
  lastReportAt: number | undefined;
}

const ZERO: Share = Object.freeze({ rate: 0, burst: 0, connections: 0 });

export class ShareSplitter {
  private limits = new Map<string, TenantLimits>();
  private readonly nodes = new Map<number, NodeLedger>();
  private seq = 0;
  private readonly floorFraction: number;
  private readonly halfLifeMs: number;

  constructor(options: ShareOptions = {}) {
    this.floorFraction = options.floorFraction ?? 0.05;
    this.halfLifeMs = options.demandHalfLifeMs ?? 100;
  }

  /** The tenants and their limits now (a reload changes them); a tenant no longer listed is forgotten. */
  setLimits(limits: readonly TenantLimits[]): void {
    this.limits = new Map(limits.map((tenant) => [tenant.name, tenant]));
    for (const ledger of this.nodes.values())
      for (const name of [...ledger.entries.keys()]) if (!this.limits.has(name)) ledger.entries.delete(name);
  }

  /** A node process started: it holds nothing (a node starts with no share). */
  addNode(node: number): void {
    this.nodes.set(node, { entries: new Map(), lastReportAt: undefined });
  }

  /** A node process is gone: what it held is free. */
  removeNode(node: number): void {
    this.nodes.delete(node);
  }

  get nodeCount(): number {
    return this.nodes.size;
  }

  private entry(ledger: NodeLedger, name: string): Entry {
    let entry = ledger.entries.get(name);
    if (!entry) {
      entry = { used: ZERO, applied: ZERO, unacked: [], open: 0, demandRate: 0, upgradeRate: 0 };
      ledger.entries.set(name, entry);
    }
    return entry;
  }

  /**
   * A node's answer to the share message `seq`: for each tenant it knows, its demand since its previous
   * report and its open connections. A tenant it does not list, it does not know: it applied nothing of it.
   */
  report(node: number, seq: number, tenants: Readonly<Record<string, TenantDemand>>, now: number): void {
    const ledger = this.nodes.get(node);
    if (!ledger) return;
    const dt = ledger.lastReportAt === undefined ? 0 : now - ledger.lastReportAt;
    ledger.lastReportAt = now;
    const alpha = dt > 0 ? 1 - 2 ** (-dt / this.halfLifeMs) : 0;
    for (const name of this.limits.keys()) {
      const entry = this.entry(ledger, name);
      const demand = tenants[name];
      let acked: Share | undefined;
      while (entry.unacked.length > 0 && entry.unacked[0]!.seq <= seq) acked = entry.unacked.shift()!.share;
      if (demand === undefined) entry.applied = ZERO;
      else if (acked !== undefined) entry.applied = acked;
      entry.open = demand?.open ?? 0;
      let used = entry.applied;
      for (const sent of entry.unacked) used = maxShare(used, sent.share);
      entry.used = { ...used, connections: Math.max(used.connections, entry.open) };
      if (demand !== undefined && dt > 0) {
        entry.demandRate += alpha * ((demand.attempts * 1000) / dt - entry.demandRate);
        entry.upgradeRate += alpha * ((demand.upgrades * 1000) / dt - entry.upgradeRate);
      }
    }
  }

  /**
   * The shares to send now, by node: each message has its own sequence number, which the node's report
   * acknowledges. Marks them sent (the bound of what each node may apply grows with a raise at once).
   */
  plan(): Map<number, { seq: number; shares: Record<string, Share> }> {
    const order = [...this.nodes.keys()].sort((a, b) => a - b);
    const out = new Map<number, { seq: number; shares: Record<string, Share> }>();
    for (const node of order) out.set(node, { seq: ++this.seq, shares: {} });
    if (order.length === 0) return out;
    for (const limits of this.limits.values()) {
      const entries = order.map((node) => this.entry(this.nodes.get(node)!, limits.name));
      const rateWeights = this.weights(entries.map((entry) => entry.demandRate));
      // The kernel spreads connections evenly over the nodes (SO_REUSEPORT): free places are split evenly,
      // half of them moving to the nodes that had to refuse upgrades.
      const refused = this.weights(entries.map((entry) => entry.upgradeRate));
      const upgradeWeights = refused.map((weight) => 0.5 / refused.length + 0.5 * weight);
      const n = order.length;
      const rate = allocate(
        limits.rateLimitRps,
        rateWeights.map((weight) => limits.rateLimitRps * weight),
        entries.map((entry) => entry.used.rate),
        false,
      );
      const burstLimit = limits.rateLimitBurst;
      const burst = allocate(
        limits.rateLimitRps > 0 ? burstLimit : 0,
        // At least one token each when the burst allows it: a node under one token can admit nothing.
        rateWeights.map((weight) => (burstLimit >= n ? 1 + (burstLimit - n) * weight : burstLimit * weight)),
        entries.map((entry) => entry.used.burst),
        false,
      );
      const cap = limits.maxConnections;
      const opens = entries.map((entry) => entry.open);
      const free = Math.max(0, cap - opens.reduce((sum, open) => sum + open, 0));
      const connections = allocate(
        cap,
        integerSplit(free, upgradeWeights).map((extra, index) => opens[index]! + extra),
        entries.map((entry) => entry.used.connections),
        true,
      );
      order.forEach((node, index) => {
        const share: Share = {
          rate: rate[index]!,
          burst: burst[index]!,
          connections: connections[index]!,
        };
        const message = out.get(node)!;
        message.shares[limits.name] = share;
        const entry = entries[index]!;
        entry.unacked.push({ seq: message.seq, share });
        entry.used = maxShare(entry.used, share);
      });
    }
    return out;
  }

  /** What the supervisor counts each node may be applying for a tenant (tests, status). */
  bound(node: number, name: string): Share {
    return this.nodes.get(node)?.entries.get(name)?.used ?? ZERO;
  }

  /** Demand weights: a floor each, the rest by demand (equal when there is none). */
  private weights(demands: readonly number[]): number[] {
    const n = demands.length;
    const total = demands.reduce((sum, demand) => sum + demand, 0);
    if (!(total > 0)) return demands.map(() => 1 / n);
    const floor = Math.min(this.floorFraction, 0.5 / n);
    return demands.map((demand) => floor + (1 - n * floor) * (demand / total));
  }
}

/**
 * Grants for one dimension of one tenant: a node whose target is at or under what it may be using gets its
 * target now; raises share what is left of `limit` once every node's bound is counted, in proportion to
 * what each asks. `limit` 0 (no limit) grants nothing: the node does not enforce that dimension.
 */
function allocate(
  limit: number,
  targets: readonly number[],
  used: readonly number[],
  integer: boolean,
): number[] {
  if (!(limit > 0)) return targets.map(() => 0);
  const grants = targets.map((target, index) => Math.min(target, used[index]!));
  let available = limit - used.reduce((sum, value) => sum + value, 0);
  const wants = targets.map((target, index) => Math.max(0, target - used[index]!));
  const wanted = wants.reduce((sum, want) => sum + want, 0);
  if (available <= 0 || wanted <= 0) return grants;
  const scale = Math.min(1, available / wanted);
  return grants.map((grant, index) => {
    const want = wants[index]!;
    if (want <= 0) return grant;
    let raise = want * scale;
    if (integer) raise = Math.floor(raise + 1e-9);
    raise = Math.min(raise, available);
    available -= raise;
    // A raise starts from the node's bound, not its lowered grant: both are what it may be using.
    return used[index]! + raise;
  });
}

/** `total` whole units split by weights: floors first, the remainder to the largest fractions. */
function integerSplit(total: number, weights: readonly number[]): number[] {
  const exact = weights.map((weight) => total * weight);
  const parts = exact.map((value) => Math.floor(value + 1e-9));
  let left = total - parts.reduce((sum, part) => sum + part, 0);
  const order = exact
    .map((value, index) => ({ index, fraction: value - Math.floor(value + 1e-9) }))
    .sort((a, b) => b.fraction - a.fraction || a.index - b.index);
  for (const { index } of order) {
    if (left <= 0) break;
    parts[index]!++;
    left--;
  }
  return parts;
}

function maxShare(a: Share, b: Share): Share {
  return {
    rate: Math.max(a.rate, b.rate),
    burst: Math.max(a.burst, b.burst),
    connections: Math.max(a.connections, b.connections),
  };
}
