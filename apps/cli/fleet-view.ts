/** `streaminfer status --fleet`: the fleet view (GET /api/fleet) as one screen. Pure: text from the answer. */
import type { FleetView } from '../supervisor/fleet/fleet-member';
import { visible } from './status-frame';

/** GET /api/fleet as the CLI reads it. */
export type FleetAnswer = FleetView;

function modelsText(models: FleetAnswer['hosts'][number]['models']): string {
  return models
    .map((model) => {
      const extras = [
        model.candidate !== undefined ? `cand ${model.candidate}` : '',
        model.canaryPercent > 0 ? `${model.canaryPercent}%` : '',
        model.shadow ? 'shadow' : '',
      ].filter(Boolean);
      return `${model.name}@${model.stable}${extras.length > 0 ? ` (${extras.join(', ')})` : ''}`;
    })
    .join(' ');
}

function pad(text: string, width: number): string {
  return text.length >= width ? text : text + ' '.repeat(width - text.length);
}

/**
 * One line per member that heartbeats, then one per member that does not (DOWN), then the heartbeats of
 * non-members (ignored); a host behind the fleet's epoch, fenced or not ready says so. Every field comes from other
 * hosts' heartbeats and records: each is printed through visible() (no terminal escape gets through).
 */
export function renderFleet(answer: FleetAnswer, now: number = Date.now()): string {
  const lines = [
    `fleet ${answer.fleet}: epoch ${answer.epoch} (revision ${answer.revision}), ${answer.hosts.length} host${answer.hosts.length === 1 ? '' : 's'}; last change "${answer.record.reason}" by ${answer.record.committedBy} at ${answer.record.committedAt}`,
    answer.coordinator
      ? `  change in progress: ${answer.coordinator.reloadId} coordinated by ${answer.coordinator.host}`
      : '  no change in progress',
  ].map(visible);
  const rows = answer.hosts.map((host) => {
    const state = host.fenced
      ? `FENCED (${host.fenceReason ?? 'in doubt'})`
      : host.epoch < answer.epoch
        ? 'BEHIND'
        : host.ready
          ? 'ready'
          : 'not ready';
    const age = Math.max(0, Math.round((now - Date.parse(host.beatAt)) / 100) / 10);
    return [
      host.host,
      host.address,
      `epoch ${host.epoch}`,
      state,
      `nodes ${host.nodesReady}/${host.nodes}`,
      `${host.requestsPerSecond} req/s`,
      modelsText(host.models),
      `seen ${age}s ago`,
    ].map((cell) => visible(cell));
  });
  const widths =
    rows.length === 0 ? [] : rows[0]!.map((_, i) => Math.max(...rows.map((row) => row[i]!.length)));
  for (const row of rows)
    lines.push(
      `  ${row
        .map((cell, i) => pad(cell, widths[i]!))
        .join('  ')
        .trimEnd()}`,
    );
  if (rows.length === 0) lines.push('  no host is heartbeating');
  // Members without a heartbeat (a change goes on without them) and heartbeats that are no member's (ignored).
  for (const member of answer.members ?? [])
    if (!member.live) lines.push(visible(`  ${member.host}  DOWN (a member with no heartbeat)`));
  if ((answer.strangers ?? []).length > 0)
    lines.push(visible(`  ignored heartbeats, not members: ${answer.strangers.join(', ')}`));
  return lines.join('\n');
}
