/**
 * How the admin API answers: a reload's outcome, a registry model, and every refusal (typed errors, a busy
 * barrier, a lost fleet write) as the JSON responses the API documents.
 */
import { type ErrorCode, encodeError, httpStatusOf, ProtocolError } from '../../../libs/protocol';
import type { ModelPlan } from '../../../libs/registry';
import type { ControlResponse } from '../../node/ipc';
import type { ReloadOutcome } from '../coordinator';
import { ReloadBusyError } from '../errors';
import { FleetError } from '../fleet';
import { FleetConflictError } from '../fleet/errors';

export const IF_REVISION_RULE = '"if_revision" must be the registry revision (a positive integer)';

/** A write's `if_revision`: absent (undefined), valid, or null when it is not a registry revision. */
export function ifRevisionOf(body: Record<string, unknown>): number | undefined | null {
  const value = body.if_revision;
  if (value === undefined) return undefined;
  return Number.isInteger(value) && (value as number) >= 1 ? (value as number) : null;
}

/** Runs a reload and turns its outcome, or its refusal, into the API's answer. */
export async function respond(run: () => Promise<ControlResponse>): Promise<ControlResponse> {
  try {
    return await run();
  } catch (error) {
    if (error instanceof ReloadBusyError) return jsonError('reload_in_progress', error.message);
    if (error instanceof FleetConflictError) {
      // The loser of a fleet write sees what won.
      const current = error.current;
      return json(httpStatusOf('conflict'), {
        id: null,
        type: 'error',
        code: 'conflict',
        message: error.message,
        ...(current
          ? {
              current: {
                revision: current.revision,
                epoch: current.record.epoch,
                table: current.record.table,
              },
            }
          : {}),
      });
    }
    if (error instanceof ProtocolError) return jsonError(error.code, error.message);
    // NATS down or electing a leader is the fleet's state, not a bug of this host: 503, retry later.
    if (error instanceof FleetError && error.code === 'cluster_unavailable')
      return jsonError('cluster_unavailable', error.message);
    return jsonError('internal', (error as Error).message);
  }
}

/**
 * A reload's outcome as the API answers it: 200, or the failure with the reason (nothing changed): 500
 * reload_failed, 507 storage_full or 500 persist_failed when the table could not be saved.
 */
export function outcomeResponse(
  outcome: ReloadOutcome,
  extra: Record<string, unknown> = {},
): ControlResponse {
  if (outcome.result === 'failed') {
    const code = outcome.code ?? 'reload_failed';
    return json(httpStatusOf(code), {
      ...outcomeBody(outcome),
      type: 'error',
      code,
      message: outcome.error,
    });
  }
  return json(200, { ...outcomeBody(outcome), ...extra });
}

export function modelView(model: ModelPlan): Record<string, unknown> {
  return {
    name: model.name,
    stable: model.stable,
    candidate: model.candidate ?? null,
    previous_stable: model.previousStable ?? null,
    canary_percent: model.canaryPercent ?? 0,
    shadow: model.shadow ?? false,
    loaded_versions: model.versions,
  };
}

export function outcomeBody(outcome: ReloadOutcome): Record<string, unknown> {
  return {
    ok: outcome.result !== 'failed',
    id: outcome.id,
    result: outcome.result,
    strategy: outcome.strategy,
    reason: outcome.reason,
    epoch: outcome.epoch,
    epoch_before: outcome.epochBefore,
    changes: outcome.changes,
    default_model: outcome.defaultModel.to,
    previous: outcome.defaultModel.from,
    duration_ms: outcome.durationMs,
    started_at: outcome.startedAt,
    ...(outcome.error ? { error: outcome.error } : {}),
    ...(outcome.warnings ? { warnings: outcome.warnings } : {}),
    ...(outcome.config
      ? { settings_applied: outcome.config.applied, restart_required: outcome.config.restartRequired }
      : {}),
    nodes: outcome.nodes,
    ...(outcome.fleet ? { fleet: { reload_id: outcome.fleet.reloadId, hosts: outcome.fleet.hosts } } : {}),
  };
}

export function json(status: number, body: unknown): ControlResponse {
  return { status, contentType: 'application/json', body: JSON.stringify(body) };
}

export function jsonError(code: ErrorCode, message: string): ControlResponse {
  return {
    status: httpStatusOf(code),
    contentType: 'application/json',
    body: encodeError(null, code, message),
  };
}
