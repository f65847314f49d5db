/**
 * This node's tenants (`--api-keys`): who a presented key belongs to, and each tenant's share of its limits
 * on this node, as the supervisor last split them (libs/tenants shares.ts). A key is hashed once per
 * WebSocket connection (at the upgrade) and once per HTTP request; frames only read the connection's tenant.
 */
import type { MetricsShard } from '../../libs/metrics';
import { MAX_TENANT_INDEX } from '../../libs/metrics';
import { ProtocolError } from '../../libs/protocol';
import { hashKey, type Share, ShareBucket, type TenantDemand, type TenantSpec } from '../../libs/tenants';

/** Distinct `rate_limited` waits kept per tenant (errors are immutable; one per wait). */
const RATE_LIMITED_ERRORS_MAX = 1024;

export class TenantState {
  spec: TenantSpec;
  /** Index of its request and shed counters in the metrics tenant block (1-based). */
  readonly metricsIndex: number;
  /** Its share of the tenant's rate on this node; undefined when the tenant has no rate limit. */
  bucket: ShareBucket | undefined;
  /** Its share of the tenant's connection cap on this node. */
  connectionShare = 0;
  /** Its open WebSocket connections on this node. */
  open = 0;
  /** Upgrades refused at its connection share since the last report (demand for more of the cap here). */
  upgrades = 0;
  private allowed: ReadonlySet<string> | undefined;
  private readonly rateLimitedErrors = new Map<number, ProtocolError>();

  constructor(spec: TenantSpec, metricsIndex: number, now: number) {
    this.spec = spec;
    this.metricsIndex = metricsIndex;
    this.bucket = spec.rateLimitRps > 0 ? new ShareBucket(now) : undefined;
    this.allowed = spec.models === '*' ? undefined : new Set(spec.models);
  }

  get name(): string {
    return this.spec.name;
  }

  /** New limits from a reload: the share stays until the supervisor moves it (within one period). */
  update(spec: TenantSpec, now: number): void {
    this.spec = spec;
    this.allowed = spec.models === '*' ? undefined : new Set(spec.models);
    if (spec.rateLimitRps === 0) this.bucket = undefined;
    else this.bucket ??= new ShareBucket(now);
    this.rateLimitedErrors.clear();
  }

  allows(model: string): boolean {
    return this.allowed === undefined || this.allowed.has(model);
  }

  /** One token of the tenant's share on this node (always, without a tenant rate limit). */
  takeToken(now: number): boolean {
    return this.bucket === undefined || this.bucket.tryTake(now);
  }

  /** Room for one more WebSocket connection of this tenant on this node. */
  get underConnectionCap(): boolean {
    return this.spec.maxConnections === 0 || this.open < this.connectionShare;
  }

  /** The `rate_limited` answer past the tenant's rate, made once per distinct wait. */
  rateLimitedError(): ProtocolError {
    const wait = this.bucket?.retryAfterMs ?? 0;
    let error = this.rateLimitedErrors.get(wait);
    if (error === undefined) {
      if (this.rateLimitedErrors.size >= RATE_LIMITED_ERRORS_MAX) this.rateLimitedErrors.clear();
      error = new ProtocolError(
        'rate_limited',
        `tenant "${this.name}" is past its limit of ${this.spec.rateLimitRps} requests per second on this host`,
        wait,
      );
      this.rateLimitedErrors.set(wait, error);
    }
    return error;
  }
}

export class Tenants {
  private byHash = new Map<string, TenantState>();
  private byName = new Map<string, TenantState>();
  /** Tenant names by metrics index (0, anonymous, has none): what /metrics labels. */
  readonly names: Array<string | undefined> = [undefined];
  private readonly freed: number[] = [];

  constructor(
    private readonly metrics: MetricsShard,
    private readonly clock: () => number,
  ) {}

  /** Keys are required: an API keys file is configured. */
  get enabled(): boolean {
    return this.byName.size > 0;
  }

  /**
   * The tenants of the configuration now (undefined: none, anonymous traffic). A tenant keeps its state
   * (share, open connections, counters) across reloads by name; a removed one frees its metrics index, which
   * goes to a new tenant only once no fresh index is left (zeroed first).
   */
  apply(specs: readonly TenantSpec[] | undefined): void {
    const now = this.clock();
    const next = new Map<string, TenantState>();
    for (const spec of specs ?? []) {
      let state = this.byName.get(spec.name);
      if (state) state.update(spec, now);
      else {
        const index = this.takeIndex();
        if (index === undefined) continue;
        state = new TenantState(spec, index, now);
        this.names[index] = spec.name;
      }
      next.set(spec.name, state);
    }
    for (const [name, state] of this.byName) {
      if (next.has(name)) continue;
      this.names[state.metricsIndex] = undefined;
      this.freed.push(state.metricsIndex);
    }
    this.byName = next;
    const byHash = new Map<string, TenantState>();
    for (const state of next.values()) for (const hash of state.spec.keyHashes) byHash.set(hash, state);
    this.byHash = byHash;
  }

  private takeIndex(): number | undefined {
    if (this.names.length <= MAX_TENANT_INDEX) {
      this.names.push(undefined);
      return this.names.length - 1;
    }
    const index = this.freed.shift();
    if (index !== undefined) this.metrics.resetTenant(index);
    return index;
  }

  /** The tenant a presented key belongs to (hashing it); undefined for no key or an unknown one. */
  lookup(key: string | undefined): TenantState | undefined {
    return key === undefined ? undefined : this.byHash.get(hashKey(key));
  }

  /** The tenant a key digest belongs to now (a reload may have revoked or moved it). */
  ofHash(keyHash: string): TenantState | undefined {
    return this.byHash.get(keyHash);
  }

  /** The supervisor's split, for the tenants this node knows (others are ignored: not committed here yet). */
  applyShares(shares: Readonly<Record<string, Share>>): void {
    const now = this.clock();
    for (const [name, share] of Object.entries(shares)) {
      const state = this.byName.get(name);
      if (!state) continue;
      state.bucket?.setShare(share.rate, share.burst, now);
      state.connectionShare = share.connections;
    }
  }

  /** Demand since the previous report, for every tenant this node knows; resets the counts. */
  report(): Record<string, TenantDemand> {
    const out: Record<string, TenantDemand> = {};
    for (const [name, state] of this.byName) {
      out[name] = { attempts: state.bucket?.attempts ?? 0, upgrades: state.upgrades, open: state.open };
      if (state.bucket) state.bucket.attempts = 0;
      state.upgrades = 0;
    }
    return out;
  }
}
