/** Creates the contract's streams when missing; an existing stream must already capture our subjects. */
import { JetStreamApiError, type JetStreamManager, type StreamInfo } from '@nats-io/jetstream';
import { describeReplicasRefusal, replicasShortfall } from '../../libs/nats-auth';
import { StreamIoError } from './errors';
import type { StreamSpec } from './layout';
import { nanos } from './nanos';

export interface ProvisionResult {
  created: string[];
  existing: string[];
}

const STREAM_NOT_FOUND = 10059;
const STREAM_NAME_IN_USE = 10058;

async function infoOrNull(jsm: JetStreamManager, name: string): Promise<StreamInfo | null> {
  try {
    return await jsm.streams.info(name);
  } catch (err) {
    if (err instanceof JetStreamApiError && err.code === STREAM_NOT_FOUND) return null;
    throw new StreamIoError('stream_provision_failed', `stream ${name}: ${String(err)}`, { cause: err });
  }
}

function checkExisting(spec: StreamSpec, info: StreamInfo, replicas: number): void {
  // Another team may own the stream: never rewrite it, refuse to run against one that misses our subjects.
  const have = new Set(info.config.subjects ?? []);
  const missing = spec.subjects.filter((subject) => !have.has(subject));
  if (missing.length > 0) {
    throw new StreamIoError(
      'stream_mismatch',
      `stream ${spec.name} exists without subjects ${missing.join(', ')} (has ${[...have].join(', ')})`,
    );
  }
  const short = replicasShortfall(info.config.num_replicas ?? 1, replicas, `stream ${spec.name}`, spec.name);
  if (short) throw new StreamIoError('stream_mismatch', short);
}

/** `replicas`: the copies a created stream gets; an existing one must have at least as many. */
export async function provisionStreams(
  jsm: JetStreamManager,
  specs: StreamSpec[],
  replicas = 1,
): Promise<ProvisionResult> {
  const result: ProvisionResult = { created: [], existing: [] };
  for (const spec of specs) {
    const info = await infoOrNull(jsm, spec.name);
    if (info) {
      checkExisting(spec, info, replicas);
      result.existing.push(spec.name);
      continue;
    }
    try {
      await jsm.streams.add({
        name: spec.name,
        subjects: spec.subjects,
        duplicate_window: nanos(spec.duplicateWindowMs),
        max_age: nanos(spec.maxAgeMs),
        max_bytes: spec.maxBytes,
        num_replicas: replicas,
      });
      result.created.push(spec.name);
    } catch (err) {
      // Two pipelines starting at once: the loser finds the winner's stream.
      if (err instanceof JetStreamApiError && err.code === STREAM_NAME_IN_USE) {
        const raced = await infoOrNull(jsm, spec.name);
        if (raced) {
          checkExisting(spec, raced, replicas);
          result.existing.push(spec.name);
          continue;
        }
      }
      const refused = describeReplicasRefusal(err, replicas, `creating stream ${spec.name}`);
      if (refused) throw new StreamIoError('invalid_options', refused, { cause: err });
      throw new StreamIoError('stream_provision_failed', `creating stream ${spec.name}: ${String(err)}`, {
        cause: err,
      });
    }
  }
  return result;
}
