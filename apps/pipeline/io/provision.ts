/** Creates the contract's streams when missing; an existing stream must already capture our subjects. */
import { JetStreamApiError, type JetStreamManager, type StreamInfo } from '@nats-io/jetstream';
import { createPlaced } from '../../../libs/jetstream';
import { describeReplicasRefusal, replicasShortfall } from '../../../libs/nats-auth';
import { PipelineIoError } from '../errors';
import { checkInputStream } from './input-stream';
import type { StreamSpec } from './layout';
import { nanos } from './nanos';

export interface ProvisionResult {
  created: string[];
  existing: string[];
  /** Input streams brought to the subjects the partitions consume: what changed, for the log. */
  updated: string[];
}

const STREAM_NOT_FOUND = 10059;
const STREAM_NAME_IN_USE = 10058;

async function infoOrNull(jsm: JetStreamManager, name: string): Promise<StreamInfo | null> {
  try {
    return await jsm.streams.info(name);
  } catch (err) {
    if (err instanceof JetStreamApiError && err.code === STREAM_NOT_FOUND) return null;
    throw new PipelineIoError('stream_provision_failed', `stream ${name}: ${String(err)}`, { cause: err });
  }
}

/**
 * The input stream must capture exactly what is consumed. One that holds nothing but the events prefix is the
 * contract's own and is updated (subjects, transform); messages it stored earlier under other subjects stay
 * where they are. Any other difference is refused.
 */
async function reconcileInput(
  jsm: JetStreamManager,
  spec: StreamSpec,
  info: StreamInfo,
  replicas: number,
): Promise<string | null> {
  const short = replicasShortfall(info.config.num_replicas ?? 1, replicas, `stream ${spec.name}`, spec.name);
  if (short) throw new PipelineIoError('stream_mismatch', short);
  const check = checkInputStream(spec, info.config);
  if (check.missing.length === 0 && check.strays.length === 0 && !check.transformDiffers) return null;
  const have = (info.config.subjects ?? []).join(', ');
  if (!check.updatable) {
    const wrong = [
      ...(check.missing.length > 0 ? [`without subjects ${check.missing.join(', ')}`] : []),
      ...(check.strays.length > 0
        ? [`with subjects no partition consumes (${check.strays.join(', ')})`]
        : []),
      ...(check.transformDiffers ? ['without the placement transform'] : []),
    ];
    throw new PipelineIoError(
      'stream_mismatch',
      `stream ${spec.name} exists ${wrong.join(' and ')} (has ${have}); not updated: ${check.refusal}`,
    );
  }
  try {
    await jsm.streams.update(spec.name, {
      subjects: spec.subjects,
      subject_transform: spec.subjectTransform
        ? { src: spec.subjectTransform.src, dest: spec.subjectTransform.dest }
        : undefined,
    });
  } catch (err) {
    throw new PipelineIoError('stream_provision_failed', `updating stream ${spec.name}: ${String(err)}`, {
      cause: err,
    });
  }
  const transform = spec.subjectTransform
    ? `, ${spec.subjectTransform.src} → ${spec.subjectTransform.dest}`
    : '';
  return `stream ${spec.name}: subjects ${have} → ${spec.subjects.join(', ')}${transform}`;
}

function checkExisting(spec: StreamSpec, info: StreamInfo, replicas: number): void {
  // Another team may own the stream: never rewrite it, refuse to run against one that misses our subjects.
  const have = new Set(info.config.subjects ?? []);
  const missing = spec.subjects.filter((subject) => !have.has(subject));
  if (missing.length > 0) {
    throw new PipelineIoError(
      'stream_mismatch',
      `stream ${spec.name} exists without subjects ${missing.join(', ')} (has ${[...have].join(', ')})`,
    );
  }
  const short = replicasShortfall(info.config.num_replicas ?? 1, replicas, `stream ${spec.name}`, spec.name);
  if (short) throw new PipelineIoError('stream_mismatch', short);
}

/** `replicas`: the copies a created stream gets; an existing one must have at least as many. */
export async function provisionStreams(
  jsm: JetStreamManager,
  specs: StreamSpec[],
  replicas = 1,
): Promise<ProvisionResult> {
  const result: ProvisionResult = { created: [], existing: [], updated: [] };
  const adopt = async (spec: StreamSpec, info: StreamInfo) => {
    if (spec.exclusive) {
      const change = await reconcileInput(jsm, spec, info, replicas);
      if (change) result.updated.push(change);
    } else checkExisting(spec, info, replicas);
    result.existing.push(spec.name);
  };
  for (const spec of specs) {
    const info = await infoOrNull(jsm, spec.name);
    if (info) {
      await adopt(spec, info);
      continue;
    }
    try {
      await createPlaced(() =>
        jsm.streams.add({
          name: spec.name,
          subjects: spec.subjects,
          ...(spec.subjectTransform ? { subject_transform: { ...spec.subjectTransform } } : {}),
          duplicate_window: nanos(spec.duplicateWindowMs),
          max_age: nanos(spec.maxAgeMs),
          max_bytes: spec.maxBytes,
          num_replicas: replicas,
        }),
      );
      result.created.push(spec.name);
    } catch (err) {
      // Two pipelines starting at once: the loser finds the winner's stream.
      if (err instanceof JetStreamApiError && err.code === STREAM_NAME_IN_USE) {
        const raced = await infoOrNull(jsm, spec.name);
        if (raced) {
          await adopt(spec, raced);
          continue;
        }
      }
      const refused = describeReplicasRefusal(err, replicas, `creating stream ${spec.name}`);
      if (refused) throw new PipelineIoError('invalid_options', refused, { cause: err });
      throw new PipelineIoError('stream_provision_failed', `creating stream ${spec.name}: ${String(err)}`, {
        cause: err,
      });
    }
  }
  return result;
}
