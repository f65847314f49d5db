/**
 * Scenario registry. To add one: create `scenarios/<name>.ts` exporting a `Scenario`
 * (`{ name, description, run(ctx) }`, see ../types.ts) and list it here. Order = run order.
 */
import type { Scenario } from '../harness/types';
import { batching } from './batching';
import { fleet } from './fleet';
import { hotSwap } from './hot-swap';
import { kvTtl } from './kv-ttl';
import { overload } from './overload';
import { registry } from './registry';
import { rollout } from './rollout';
import { runaway } from './runaway';
import { slowConsumer } from './slow-consumer';
import { stream } from './stream';
import { streamChaos } from './stream-chaos';
import { streamOwnership } from './stream-ownership';
import { streamScale } from './stream-scale';
import { sweep } from './sweep';
import { wsEcho } from './ws-echo';
import { wsEchoTls } from './ws-echo-tls';

export const SCENARIOS: readonly Scenario[] = [
  wsEcho,
  wsEchoTls,
  batching,
  runaway,
  overload,
  slowConsumer,
  hotSwap,
  registry,
  rollout,
  fleet,
  stream,
  streamChaos,
  streamScale,
  kvTtl,
  streamOwnership,
  sweep,
];

export function findScenario(name: string): Scenario | undefined {
  return SCENARIOS.find((s) => s.name === name);
}
