/**
 * What this host knows of its fleet and says of itself, shared by the membership's parts (fleet-member.ts
 * wires them): the latest registry record it read, the reload it holds prepared (in doubt until the fleet
 * commits or aborts it), whether it is a member, its fence and its lag; and the one queue that its actions on
 * the host's barrier (a step, a catch-up, an in-doubt resolution) run in, one at a time.
 */
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { TablePlan } from '../../../libs/registry';
import type { ReloadCoordinator } from '../coordinator';
import type {
  CoordinatorLease,
  FleetConnection,
  FleetRecord,
  FleetTable,
  HostBoard,
  HostStepClient,
  ModelArtifacts,
  RegistryStore,
} from './';

/** What the member needs of its host (the supervisor). */
export interface FleetHost {
  /** The host's own barrier over its nodes. */
  coordinator(): ReloadCoordinator;
  /** The fleet's table as this host serves it: with this host's own live settings. */
  hostPlan(table: FleetTable): TablePlan;
  /** Stop (reason) or resume (null) taking traffic. */
  fence(reason: string | null): void;
  /** What the heartbeat says of the host's nodes and load. */
  load(): { nodes: number; nodesReady: number; requestsPerSecond: number };
}

export interface FleetMemberOptions {
  fleet: string;
  hostId: string;
  address: string;
  modelsDir: string;
  connection: FleetConnection;
  store: RegistryStore;
  board: HostBoard;
  lease: CoordinatorLease;
  steps: HostStepClient;
  artifacts: ModelArtifacts;
  host: FleetHost;
  logger: Logger;
  /**
   * A prepared host that hears neither COMMIT nor ABORT this long is in doubt: it fences itself. It must exceed
   * the coordinator's step timeout (the longest a coordinator waits for the slowest PREPARE before it decides).
   */
  commitTimeoutMs?: number;
  /** STREAMINFER_TEST_FLEET_COMMIT_DELAY_MS: a coordinator holds its commit point that long (tests only). */
  testHooks?: boolean;
  /** The supervisor's metrics registry: the fleet's series join it. */
  registry?: Registry;
  heartbeatMs?: number;
  now?: () => number;
  /** The host starts behind the record (it could not load or read it at join): see FleetMember.behind. */
  behind?: string;
}

/** A reload this host prepared and holds, until the fleet commits or aborts it. */
export interface HeldReload {
  reloadId: string;
  epochBefore: number;
  /** Fires the in-doubt fence when neither COMMIT nor ABORT came in time. */
  timer: NodeJS.Timeout;
}

export class MemberState {
  /** The last registry record this host read (watch, catch-up, or its own write). */
  latest: { record: FleetRecord; revision: number } | undefined;
  /** The reload this host prepared and holds, until the fleet commits or aborts it. */
  inDoubt: HeldReload | undefined;
  /** This host is in the record's members (it joined, or found itself there). */
  joined = false;
  /** It was a member and the record no longer lists it (an operator excluded it): it re-joins once caught up. */
  excluded = false;
  /** The member is closing: no more retries, joins or catch-ups. */
  stopped = false;
  private fenceReason: string | undefined;
  /** Why this host serves an older table than the record's (it cannot load the record's), while it does. */
  private behindReason: string | undefined;
  private queue: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly host: FleetHost,
    private readonly logger: Logger,
    behind: string | undefined,
  ) {
    this.behindReason = behind;
  }

  get fenced(): string | undefined {
    return this.fenceReason;
  }

  get behind(): string | undefined {
    return this.behindReason;
  }

  /** Runs `action` after every action queued before it (whether they failed or not). */
  serialized<T>(action: () => Promise<T>): Promise<T> {
    const run = this.queue.then(action, action);
    this.queue = run.catch(() => undefined);
    return run;
  }

  setBehind(reason: string | undefined): void {
    if (this.behindReason === reason) return;
    this.behindReason = reason;
    if (reason !== undefined)
      this.logger.warn({ reason }, 'fleet: behind the registry record; serving the last committed table');
    else this.logger.info({ epoch: this.host.coordinator().epoch }, 'fleet: caught up');
  }

  setFence(reason: string): void {
    if (this.fenceReason === reason) return;
    this.fenceReason = reason;
    this.logger.warn({ reason }, 'fleet: fenced, not taking traffic');
    this.host.fence(reason);
  }

  unfence(): void {
    // An excluded host serves again once it is a member again (ensureMember).
    if (this.fenceReason === undefined || this.excluded) return;
    this.fenceReason = undefined;
    this.logger.info({ epoch: this.host.coordinator().epoch }, 'fleet: caught up, fence lifted');
    this.host.fence(null);
  }
}
