/**
 * What a rollout check may count, so that no client can steer it: only answers to requests the router assigned to a version (route
 * `stable` or `canary`; a client that named the version — `pinned` — chose it, so its answers say nothing about
 * the rollout and anyone could send them), and of those only what the version can be blamed for. The nodes
 * apply this per answer into their judged counters (`streaminfer_rollout_judged_*`); the controller reads
 * those. Shadow copies are judged by the shadow comparison counters (apps/node/shadow.ts), never here.
 *
 * - `ok` counts as an answer.
 * - `model_error` and `internal` are the version's errors.
 * - `deadline_exceeded` is the version's error only when the request's deadline (deadline − admission) was at
 *   least the model's service floor: the running mean of queue + compute time of successful answers of its
 *   fastest version on the node (ServiceTimes). A shorter deadline could not have been met even by that
 *   version: the client's fault. Taking the fastest version's time means a slow version cannot excuse its own
 *   timeouts, and an attacker who slows one side (load on it) does not raise the floor.
 * - Every other code is the client's (bad requests, `rate_limited`, `client_queue_full`), the load's
 *   (`overloaded`, shed) or the host's (`unavailable`, `fenced`): left out, neither an answer nor an error. A
 *   code added later is left out until it is named here.
 */
import { ERROR_CODES, type ErrorCode } from '../protocol';

export const JUDGED = { excluded: 0, ok: 1, error: 2, deadline: 3 } as const;
export type Judged = (typeof JUDGED)[keyof typeof JUDGED];

/** Codes that are always the version's own fault. */
export const VERSION_FAULT_CODES: ReadonlySet<ErrorCode> = new Set<ErrorCode>(['model_error', 'internal']);

/** The router's routes (apps/node/admission.ts); `pinned` = the client named the version. */
export type JudgedRoute = 'stable' | 'canary' | 'pinned';

/**
 * How an answer counts: `excluded`, `ok` or `error` (never `deadline`). `budgetMs` is the request's deadline
 * relative to its admission, `serviceFloorMs` the model's floor (0 when nothing was measured: every routed
 * timeout counts).
 */
export function judgeAnswer(
  route: JudgedRoute,
  code: ErrorCode | 'ok',
  budgetMs: number,
  serviceFloorMs: number,
): Judged {
  if (route === 'pinned') return JUDGED.excluded;
  const judged = judgedCode(code);
  if (judged !== JUDGED.deadline) return judged;
  return budgetMs >= serviceFloorMs ? JUDGED.error : JUDGED.excluded;
}

/** The rule for a routed answer's code; `deadline`: compare the deadline with the service floor. */
function judgedCode(code: ErrorCode | 'ok'): Judged {
  if (code === 'ok') return JUDGED.ok;
  if (code === 'deadline_exceeded') return JUDGED.deadline;
  return VERSION_FAULT_CODES.has(code) ? JUDGED.error : JUDGED.excluded;
}

/** judgedCode by wire code index (0 = ok, i = ERROR_CODES[i − 1]), for the answer path. */
export const judgedByCode: Uint8Array = Uint8Array.from(['ok' as const, ...ERROR_CODES].map(judgedCode));

/** Weight of one new measurement in the running mean: about the last 32 answers. */
const WEIGHT = 1 / 32;

/**
 * The measured service time (queue + compute of successful answers, ms) of each slot, as a running mean, and
 * the floor of a model: the lowest mean among its slots (0 with none measured). One writer (a node's gateway
 * thread); no allocation per observation.
 */
export class ServiceTimes {
  private readonly means: Float64Array;
  private readonly models: Array<string | undefined>;
  private readonly versions: Array<string | undefined>;

  constructor(readonly slots: number) {
    this.means = new Float64Array(slots);
    this.models = new Array<string | undefined>(slots).fill(undefined);
    this.versions = new Array<string | undefined>(slots).fill(undefined);
  }

  observe(slot: number, model: string, version: string, serviceMs: number): void {
    if (!(slot >= 0 && slot < this.slots) || !(serviceMs >= 0) || !Number.isFinite(serviceMs)) return;
    if (this.models[slot] !== model || this.versions[slot] !== version) {
      // A new slot, or one reused for another version: its mean starts from this answer.
      this.models[slot] = model;
      this.versions[slot] = version;
      this.means[slot] = serviceMs;
      return;
    }
    this.means[slot]! += (serviceMs - this.means[slot]!) * WEIGHT;
  }

  floorMs(model: string): number {
    let floor = Number.POSITIVE_INFINITY;
    for (let slot = 0; slot < this.slots; slot++)
      if (this.models[slot] === model && this.means[slot]! < floor) floor = this.means[slot]!;
    return Number.isFinite(floor) ? floor : 0;
  }
}
