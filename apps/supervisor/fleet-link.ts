/**
 * The supervisor's side of its fleet (`--cluster`): joins at start, lets the membership (fleet/fleet-member.ts)
 * see the host (its barrier, its live settings, its fence, its load), runs the host's table changes through the
 * fleet's barrier and answers them as this host's outcome, and serves the fleet routes of the admin API. Alone
 * (no `--cluster`) every call here is a no-op or a 404.
 */
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { ServerConfig } from '../../libs/config';
import type { NatsAuth } from '../../libs/nats-auth';
import { ProtocolError } from '../../libs/protocol';
import type { NodeSettings, TablePlan } from '../../libs/registry';
import type { TrustedKeys } from '../../libs/signing';
import type { FleetAdmin } from './admin/admin-api';
import { diffTables, type ReloadCoordinator, type ReloadOutcome } from './coordinator';
import type { FleetTable } from './fleet';
import type { FleetChangeOptions } from './fleet/fleet-change';
import { joinFleet } from './fleet/fleet-join';
import type { FleetMember, FleetView } from './fleet/fleet-member';
import type { FleetReloadOutcome } from './fleet/fleet-reload';
import type { FleetHost } from './fleet/member-state';
import type { NodeSet } from './node-set';
import { FleetRolloutStore } from './rollout/rollout-store';

export interface FleetLinkOptions {
  /** The configuration in force (a configuration reload replaces it). */
  config: () => ServerConfig;
  /** The fleet's NATS settings loaded at start; default: loaded from `config` on joining. */
  nats?: NatsAuth;
  logger: Logger;
  testHooks: boolean;
  registry: Registry;
  trustedKeys: () => TrustedKeys | undefined;
  /** The host's barrier over its nodes (set by the time the membership starts). */
  coordinator: () => ReloadCoordinator;
  /** A plan as this host's nodes get it (what it could not load). */
  hostSide: (plan: TablePlan) => TablePlan;
  nodeSet: NodeSet;
  /** The heartbeat pings the nodes itself (systemd's watchdog does, when it runs). */
  pingsNodes: boolean;
}

export class FleetLink implements FleetAdmin {
  /** This host's membership of its fleet; undefined when it works alone. */
  private member: FleetMember | undefined;
  /** The live settings a configuration reload running through the fleet gives this host. */
  private pendingSettings: NodeSettings | undefined;
  private readonly requestRate = new RateSampler();

  constructor(private readonly options: FleetLinkOptions) {}

  /** Whether this host is in a fleet (it joined at start). */
  get joined(): boolean {
    return this.member !== undefined;
  }

  get fence(): string | undefined {
    return this.member?.fenced;
  }

  get behind(): string | undefined {
    return this.member?.behind;
  }

  get fleet(): { name: string; host: string } | undefined {
    return this.member ? { name: this.member.fleet, host: this.member.hostId } : undefined;
  }

  /**
   * With `--cluster`, joins the fleet before the nodes start: the fleet's record wins over the local state, so
   * the host starts on the fleet's table at its epoch. Alone: undefined (the host starts on its own table).
   */
  async join(initial: FleetTable): Promise<{ table: FleetTable; epoch: number } | undefined> {
    const { config, nats, logger, testHooks, registry, trustedKeys } = this.options;
    if (config().cluster === undefined) return undefined;
    const joined = await joinFleet({
      config: config(),
      ...(nats ? { nats } : {}),
      initial,
      host: this.host(),
      logger,
      testHooks,
      registry,
      trustedKeys,
    });
    this.member = joined.member;
    return joined.start;
  }

  /** Once the nodes are up: the membership answers steps and follows the record; the fleet's rollout store. */
  async start(): Promise<{ store: FleetRolloutStore; hostId: string } | undefined> {
    if (!this.member) return undefined;
    await this.member.start();
    // A fleet's rollouts live in its KV bucket (any host follows them; one drives each).
    return { store: new FleetRolloutStore(await this.member.openRollouts()), hostId: this.member.hostId };
  }

  /** Out of the fleet: no coordinator counts on a host that is going away. */
  async close(): Promise<void> {
    await this.member?.close();
  }

  /** A version pushed to the fleet but not yet here is fetched (and verified) before it is planned. */
  async fetchVersion(model: string, version: string): Promise<void> {
    await this.member?.fetchVersion(model, version);
  }

  /** GET /api/fleet: 404 when this host is not in a fleet. */
  async view(): Promise<FleetView> {
    return this.joinedMember().view();
  }

  /** POST /api/fleet/hosts/{host}/exclude: 404 when this host is not in a fleet or the host not a member. */
  async exclude(host: string): Promise<unknown> {
    return this.joinedMember().exclude(host);
  }

  /**
   * A change of the fleet's table, coordinated by this host through the fleet's barrier: `next` maps the
   * committed table to the one asked for. A reload gives this host's live settings with it (`host.settings`,
   * those of a configuration reload; undefined: the table's). The answer is this host's outcome with the
   * fleet's per host.
   */
  async change(
    next: (table: FleetTable) => FleetTable,
    options: FleetChangeOptions,
    host?: { settings: NodeSettings | undefined },
  ): Promise<ReloadOutcome> {
    if (host) this.pendingSettings = host.settings;
    try {
      const coordinator = this.options.coordinator();
      const before = coordinator.table;
      const fleet = await this.member!.change(next, options);
      return fleetOutcome(fleet, before, coordinator);
    } finally {
      if (host) this.pendingSettings = undefined;
    }
  }

  private joinedMember(): FleetMember {
    if (!this.member)
      throw new ProtocolError('not_found', 'this host is not in a fleet (start it with --cluster)');
    return this.member;
  }

  /** The supervisor as its fleet membership sees it. */
  private host(): FleetHost {
    const { coordinator, hostSide, nodeSet, config } = this.options;
    return {
      coordinator,
      hostPlan: (table) =>
        hostSide({ ...table, settings: this.pendingSettings ?? coordinator().table.settings }),
      fence: (reason) => nodeSet.fence(reason),
      load: () => {
        // The notifier's heartbeat pings the nodes (their pongs carry the answered counts); without it, this one.
        if (!this.options.pingsNodes) nodeSet.heartbeat();
        return {
          nodes: config().nodes,
          nodesReady: nodeSet.nodes.filter((handle) => handle.ready).length,
          requestsPerSecond: this.requestRate.sample(nodeSet.answeredTotal(), Date.now()),
        };
      },
    };
  }
}

/** Requests per second between two samples of a growing count (the fleet heartbeat's load figure). */
class RateSampler {
  private last: { count: number; at: number } | undefined;
  private rate = 0;

  sample(count: number, at: number): number {
    const last = this.last;
    if (last && at > last.at && count >= last.count)
      this.rate = ((count - last.count) * 1000) / (at - last.at);
    this.last = { count, at };
    return Math.round(this.rate * 10) / 10;
  }
}

/**
 * A fleet reload as this host answers it: the fleet's result and epochs, the table change, this host's own
 * nodes (when its part of the reload is the last one it ran), and every host's state.
 */
function fleetOutcome(
  fleet: FleetReloadOutcome,
  before: TablePlan,
  coordinator: ReloadCoordinator,
): ReloadOutcome {
  const local = coordinator.last;
  const mine = local?.reason.includes(fleet.id) ? local : undefined;
  const after = coordinator.table;
  const outcome: ReloadOutcome = {
    id: mine?.id ?? 0,
    result: fleet.result === 'conflict' ? 'failed' : fleet.result,
    strategy: fleet.strategy,
    reason: fleet.reason,
    epochBefore: fleet.epochBefore,
    epoch: fleet.epoch,
    changes: diffTables(before, after),
    defaultModel: { from: before.defaultModel, to: after.defaultModel },
    startedAt: fleet.startedAt,
    durationMs: fleet.durationMs,
    nodes: mine?.nodes ?? [],
    fleet: { reloadId: fleet.id, hosts: fleet.hosts },
  };
  if (fleet.error !== undefined) outcome.error = fleet.error;
  if (fleet.warnings !== undefined) outcome.warnings = fleet.warnings;
  return outcome;
}
