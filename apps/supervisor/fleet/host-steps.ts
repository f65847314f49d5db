/**
 * The fleet barrier's steps, host to host: request/reply on `streaminfer.fleet.<F>.host.<hostId>`, JSON both
 * ways. Like NodeChannel, neither side throws: a malformed request, a failing handler, a timeout, no
 * responder or NATS down all become `{ ok: false, error }`.
 */
import type { StepAnswer } from '../coordinator';
import type { FleetConnection } from './connection';
import { FleetError } from './errors';
import { type FleetTable, parseFleetTable } from './records';

export const HOST_STEPS = ['prepare', 'commit', 'abort', 'release', 'roll'] as const;
export type HostStep = (typeof HOST_STEPS)[number];

/** The table travels without per-host settings: each host applies its own (withSettings) on its side. */
export type TablePlanLike = FleetTable;

export interface HostStepRequest {
  step: HostStep;
  reloadId: string;
  plan?: TablePlanLike;
  epoch?: number;
}

// nats-core's Msg, which transport-node's typings do not let TypeScript's node10 resolution see.
interface StepMsg {
  data: Uint8Array;
  respond(data: Uint8Array): boolean;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export function parseHostStepRequest(bytes: Uint8Array): HostStepRequest {
  let value: Partial<Record<keyof HostStepRequest, unknown>>;
  try {
    value = JSON.parse(decoder.decode(bytes));
  } catch {
    throw new FleetError('invalid_record', 'host step: request is not JSON');
  }
  if (typeof value !== 'object' || value === null)
    throw new FleetError('invalid_record', 'host step: request is not an object');
  if (!HOST_STEPS.includes(value.step as HostStep))
    throw new FleetError('invalid_record', `host step: unknown step ${String(value.step)}`);
  if (typeof value.reloadId !== 'string' || value.reloadId === '')
    throw new FleetError('invalid_record', 'host step: reloadId must be a non-empty string');
  const request: HostStepRequest = { step: value.step as HostStep, reloadId: value.reloadId };
  if (value.plan !== undefined) request.plan = parseFleetTable(value.plan, 'host step: plan');
  if (value.epoch !== undefined) {
    if (typeof value.epoch !== 'number' || !Number.isSafeInteger(value.epoch) || value.epoch < 0)
      throw new FleetError('invalid_record', 'host step: epoch must be an integer >= 0');
    request.epoch = value.epoch;
  }
  return request;
}

function parseAnswer(bytes: Uint8Array): StepAnswer {
  try {
    const value = JSON.parse(decoder.decode(bytes)) as Partial<StepAnswer> | null;
    if (typeof value?.ok !== 'boolean') return { ok: false, error: 'malformed step answer (no ok)' };
    const answer: StepAnswer = { ok: value.ok };
    if (typeof value.error === 'string') answer.error = value.error;
    if (value.data !== undefined) answer.data = value.data;
    return answer;
  } catch {
    return { ok: false, error: 'malformed step answer (not JSON)' };
  }
}

export interface HostStepServer {
  /** Stops answering (in-flight handlers still reply). */
  stop(): void;
}

/** Answers the steps addressed to `hostId` (default: this connection's host) with `handler`. */
export function serveHostSteps(
  conn: FleetConnection,
  handler: (request: HostStepRequest) => Promise<StepAnswer>,
  hostId: string = conn.hostId,
): HostStepServer {
  const subject = conn.names.hostSubject(hostId);
  const sub = conn.nc.subscribe(subject, {
    callback: (err: Error | null, msg: StepMsg) => {
      if (err) return;
      void (async () => {
        let answer: StepAnswer;
        try {
          answer = await handler(parseHostStepRequest(msg.data));
        } catch (handlerErr) {
          answer = { ok: false, error: errorText(handlerErr) };
        }
        try {
          msg.respond(encoder.encode(JSON.stringify(answer)));
        } catch {
          // Connection closed meanwhile: the caller times out.
        }
      })();
    },
  });
  return { stop: () => sub.unsubscribe() };
}

/** A step's answer; `down`: the host cannot have taken the step (no responder: it has no NATS connection). */
export interface HostStepAnswer extends StepAnswer {
  down?: boolean;
}

export interface HostStepClient {
  /** Never throws: timeout, no responder, NATS down → `{ ok: false, error }` (no responder: `down` too). */
  call(hostId: string, request: HostStepRequest): Promise<HostStepAnswer>;
}

/**
 * NATS answered "no responders": nobody subscribes to the host's step subject, so the host is not connected
 * (crashed, killed, stopped) — unlike a timeout, where it may be connected and slow, or cut off.
 */
export function isNoResponders(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    if (e.name === 'NoRespondersError') return true;
    const probe = (e as { isNoResponders?: () => boolean }).isNoResponders;
    if (typeof probe === 'function' && probe.call(e)) return true;
  }
  return false;
}

export function hostStepClient(conn: FleetConnection, timeoutMs: number): HostStepClient {
  return {
    async call(hostId, request) {
      try {
        const subject = conn.names.hostSubject(hostId);
        const payload = encoder.encode(JSON.stringify(request));
        const reply = await conn.call(
          `step ${request.step} on ${hostId}`,
          () => conn.nc.request(subject, payload, { timeout: timeoutMs }) as Promise<StepMsg>,
        );
        return parseAnswer(reply.data);
      } catch (err) {
        if (isNoResponders(err))
          return {
            ok: false,
            down: true,
            error: `host ${hostId} is not connected to NATS (no responders on its step subject)`,
          };
        const cause = err instanceof Error && err.cause instanceof Error ? `: ${err.cause.message}` : '';
        return {
          ok: false,
          error: `host ${hostId} did not answer ${request.step}: ${errorText(err)}${cause}`,
        };
      }
    },
  };
}
