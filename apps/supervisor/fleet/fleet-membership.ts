/**
 * Fleet membership, pure: who must PREPARE a fleet change. Members are the registry record's
 * `members`, changed only by CAS on the record (a host joins when it starts, leaves when it stops cleanly, an
 * operator excludes a silent one); heartbeats only say which members are alive. A heartbeat key of a host that
 * is not a member (a stale id, a hand-written key) is a stranger: ignored.
 */
import { isDeepStrictEqual } from 'node:util';
import type { FleetRecord } from './';

/** The members as sorted host ids; undefined when the record predates membership (format 1). */
export type Members = readonly string[] | undefined;

export interface Roll {
  /** Members with a fresh heartbeat, and this host: each must PREPARE. Sorted. */
  live: string[];
  /** Members without a fresh heartbeat: crashed, stopped without leaving, or cut off. A change goes on without them. */
  down: string[];
  /** Heartbeats of hosts that are not members: ignored. */
  strangers: string[];
}

/**
 * Splits the heartbeating hosts by the record's members. A format-1 record (no members yet) keeps the old rule,
 * every heartbeat a member, until the first host of this build joins and writes them.
 */
export function rollCall(members: Members, beating: readonly string[], self: string): Roll {
  const alive = new Set(beating);
  if (members === undefined) return { live: sorted([...alive, self]), down: [], strangers: [] };
  const listed = new Set(members);
  return {
    live: sorted([...members.filter((host) => alive.has(host) || host === self), self]),
    down: sorted(members.filter((host) => !alive.has(host) && host !== self)),
    strangers: sorted(beating.filter((host) => !listed.has(host) && host !== self)),
  };
}

/** The members with `host` in; null when it is in already. */
export function withMember(members: Members, host: string): string[] | null {
  if (members?.includes(host)) return null;
  return sorted([...(members ?? []), host]);
}

/** The members without `host`; null when it is not one. */
export function withoutMember(members: Members, host: string): string[] | null {
  if (members === undefined || !members.includes(host)) return null;
  return members.filter((member) => member !== host);
}

/**
 * Whether `current` differs from `base` only in its members (a join, leave or exclusion landed meanwhile):
 * then a fleet change read from `base` may commit on `current`'s revision with `current`'s members. Whoever
 * joined after the change read its hosts did not PREPARE it, and catches up from the record like a late host.
 */
export function onlyMembersMoved(base: FleetRecord, current: FleetRecord): boolean {
  // As stored (JSON: an undefined field is an absent one), in any key order.
  const strip = ({ members: _members, format: _format, ...rest }: FleetRecord) =>
    JSON.parse(JSON.stringify(rest)) as unknown;
  return isDeepStrictEqual(strip(base), strip(current));
}

function sorted(hosts: string[]): string[] {
  return [...new Set(hosts)].sort();
}
