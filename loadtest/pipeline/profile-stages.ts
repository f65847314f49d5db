/**
 * Where the pipeline process's time goes, by stage, from a V8 CPU profile of its main thread (GET
 * /api/profile): each sample's stack is given to the first stage, in STAGES order, that one of its frames
 * belongs to — so JSON.parse under the decider's parseEvent is decode, not decide, and a NATS write under the
 * sink is publish, not receive.
 */

export interface CpuProfileNode {
  id: number;
  callFrame: { functionName: string; url: string };
  children?: number[];
}

export interface CpuProfile {
  nodes: CpuProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

export const STAGES = [
  'checkpoint',
  'decode',
  'encode',
  'infer',
  'publish',
  'ack',
  'receive',
  'decide',
  'metrics',
  'admin',
  'gc',
  'idle',
  'other',
] as const;
export type Stage = (typeof STAGES)[number];

type Frame = CpuProfileNode['callFrame'];
const inFile = (f: Frame, ...parts: string[]) => parts.some((p) => f.url.includes(p));

/** Whether a frame belongs to a stage (the stack's first match, in STAGES order, wins). */
const RULES: Record<Exclude<Stage, 'other'>, (f: Frame) => boolean> = {
  checkpoint: (f) =>
    inFile(
      f,
      '/apps/pipeline/checkpointer.js',
      '/apps/pipeline/io/checkpoints.js',
      '/libs/delivery/snapshot-job.js',
    ) ||
    inFile(
      f,
      '/libs/delivery/history-codec.js',
      '/libs/event-time/snapshot.js',
      '/libs/event-time/pack.js',
    ) ||
    (inFile(f, '/libs/delivery/decider.js') &&
      /^(snapshot|beginSnapshot|captureKey|packDelivery|restore)$/.test(f.functionName)),
  decode: (f) => inFile(f, '/libs/delivery/schema.js') && /^(parse|validate)/.test(f.functionName),
  encode: (f) => inFile(f, '/apps/pipeline/effects.js', '/apps/pipeline/io/side-outputs.js'),
  infer: (f) => inFile(f, '/apps/pipeline/inference/', '/libs/ring/', '/libs/batching/', '/libs/inference/'),
  publish: (f) =>
    inFile(f, '/apps/pipeline/io/sink.js') ||
    (inFile(f, '@nats-io/') && /^(publish|_publish|headers|msgID)$/.test(f.functionName)),
  ack: (f) =>
    /^(ack|ackAck|doAck|nak|working)$/.test(f.functionName) &&
    inFile(f, '@nats-io/jetstream', '/io/source.js'),
  receive: (f) =>
    inFile(f, '@nats-io/', '/apps/pipeline/io/source.js', 'node:net', 'node:internal/stream_base'),
  decide: (f) => inFile(f, '/libs/delivery/', '/libs/event-time/', '/apps/pipeline/partition-messages.js'),
  metrics: (f) => inFile(f, 'prom-client', '/apps/pipeline/metrics/'),
  admin: (f) => inFile(f, '/libs/admin/', '/apps/pipeline/admin.js', '/apps/pipeline/pipeline-status.js'),
  gc: (f) => f.functionName === '(garbage collector)',
  idle: (f) => f.functionName === '(idle)',
};

function stageOfFrame(f: Frame): number {
  for (let s = 0; s < STAGES.length - 1; s++) if (RULES[STAGES[s] as Exclude<Stage, 'other'>](f)) return s;
  return STAGES.length - 1;
}

export interface StageCost {
  stage: Stage;
  /** CPU ms of the main thread in this stage over the profile */
  ms: number;
  /** share of the profile's busy (non-idle) time, % */
  pct: number;
  /** µs per event when `events` is given */
  usPerEvent?: number;
}

/** Time per stage; `events` processed while profiling turns it into µs per event. */
export function stageCosts(profile: CpuProfile, events?: number): StageCost[] {
  const parent = new Map<number, number>();
  const byId = new Map<number, CpuProfileNode>();
  for (const n of profile.nodes) {
    byId.set(n.id, n);
    for (const c of n.children ?? []) parent.set(c, n.id);
  }
  // A node's stage: the best (lowest index) stage of it and its ancestors.
  const stageOf = new Map<number, number>();
  const resolve = (id: number): number => {
    const known = stageOf.get(id);
    if (known !== undefined) return known;
    const own = stageOfFrame(byId.get(id)!.callFrame);
    const up = parent.get(id);
    const best = up === undefined ? own : Math.min(own, resolve(up));
    stageOf.set(id, best);
    return best;
  };
  const us = new Array<number>(STAGES.length).fill(0);
  // timeDeltas[i] is the gap before sample i: sample i lasted until the next one.
  for (let i = 0; i < profile.samples.length; i++) {
    const dt = profile.timeDeltas[i + 1] ?? 0;
    us[resolve(profile.samples[i]!)]! += Math.max(0, dt);
  }
  const idle = us[STAGES.indexOf('idle')]!;
  const busy = us.reduce((a, b) => a + b, 0) - idle;
  return STAGES.map((stage, s) => ({
    stage,
    ms: Math.round(us[s]! / 100) / 10,
    pct: stage === 'idle' || busy === 0 ? 0 : Math.round((us[s]! / busy) * 1000) / 10,
    ...(events ? { usPerEvent: Math.round((us[s]! / events) * 10) / 10 } : {}),
  }));
}
