/** The fleet's series on this host: its link to NATS, its membership, fence and lag, and what it did. */
import { Counter, Gauge, type Registry } from 'prom-client';

/** What the gauges read of the member at scrape time. */
export interface MemberStatus {
  readonly available: boolean;
  readonly fenced: string | undefined;
  readonly member: boolean;
  readonly behind: string | undefined;
  readonly recordEpoch: number | undefined;
}

export interface FleetMetrics {
  reloads: Counter<'result' | 'strategy'>;
  catchUps: Counter<'result'>;
  inDoubt: Counter;
}

/** The fleet's series on this host (no `host` label: Prometheus's `instance` already says which host). */
export function fleetMetrics(registry: Registry, member: MemberStatus): FleetMetrics {
  const registers = [registry];
  new Gauge({
    name: 'streaminfer_fleet_cluster_up',
    help: "1 while this host reaches its fleet's NATS (admin writes need it; serving does not).",
    registers,
    collect() {
      this.set(member.available ? 1 : 0);
    },
  });
  new Gauge({
    name: 'streaminfer_fleet_fenced',
    help: '1 while this host is fenced from its fleet (in doubt about a reload, or behind it): it refuses traffic.',
    registers,
    collect() {
      this.set(member.fenced === undefined ? 0 : 1);
    },
  });
  new Gauge({
    name: 'streaminfer_fleet_member',
    help: "1 while this host is in its fleet's members (0: not joined yet, or excluded and catching up).",
    registers,
    collect() {
      this.set(member.member ? 1 : 0);
    },
  });
  new Gauge({
    name: 'streaminfer_fleet_behind',
    help: "1 while this host serves an older table than the fleet's record because it cannot load the record's (a version missing here and not pushed): degraded, still serving.",
    registers,
    collect() {
      this.set(member.behind === undefined ? 0 : 1);
    },
  });
  new Gauge({
    name: 'streaminfer_fleet_record_epoch',
    help: "The fleet's epoch in the last registry record this host read (the host's own is streaminfer_model_epoch).",
    registers,
    collect() {
      const epoch = member.recordEpoch;
      if (epoch !== undefined) this.set(epoch);
    },
  });
  return {
    reloads: new Counter({
      name: 'streaminfer_fleet_reloads_total',
      help: 'Fleet reloads this host coordinated, by result (committed, failed, unchanged, conflict) and strategy.',
      labelNames: ['result', 'strategy'],
      registers,
    }),
    catchUps: new Counter({
      name: 'streaminfer_fleet_catchups_total',
      help: "Times this host reloaded itself to the fleet's record (after a partition, a late start, a missed COMMIT).",
      labelNames: ['result'],
      registers,
    }),
    inDoubt: new Counter({
      name: 'streaminfer_fleet_in_doubt_total',
      help: 'Times this host prepared a fleet reload and heard neither COMMIT nor ABORT in time (it fenced itself).',
      registers,
    }),
  };
}
