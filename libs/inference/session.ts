import * as ort from 'onnxruntime-node';
import type { DeviceTarget } from '../config';
import type { ExecutionProviderName, ProviderAttempt } from '../device';
import { DeviceError, planProviders, providerLabel } from '../device';
import type { DType, ModelSignature, TensorSpec } from '../protocol';

export interface SessionOptions {
  device: DeviceTarget;
  intraOpThreads: number;
}

export interface LoadedSession {
  session: ort.InferenceSession;
  executionProvider: ExecutionProviderName;
  deviceId: number;
  /** Set when the session runs somewhere other than asked (auto → WebGPU or CPU). */
  fallbackReason?: string;
}

export function availableBackends(): string[] {
  try {
    return ort.listSupportedBackends().map((backend) => backend.name);
  } catch {
    return ['cpu'];
  }
}

function sessionOptions(
  attempt: ProviderAttempt,
  intraOpThreads: number,
): ort.InferenceSession.SessionOptions {
  // The WebGPU provider takes no device option (it opens the default adapter; planProviders refuses others).
  const providers: ort.InferenceSession.ExecutionProviderConfig[] =
    attempt.provider === 'cuda'
      ? [{ name: 'cuda', deviceId: attempt.deviceId } as ort.InferenceSession.ExecutionProviderConfig]
      : [attempt.provider];
  return {
    executionProviders: providers,
    intraOpNumThreads: intraOpThreads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
    logSeverityLevel: 3,
    // Idle intra-op threads must sleep, not spin: the gateway and other workers share these cores.
    extra: { session: { intra_op: { allow_spinning: '0' }, inter_op: { allow_spinning: '0' } } },
  };
}

/**
 * ONNX Runtime's message without its source location: a failed check reads `/onnxruntime_src/…/file.cc:136
 * <function> <condition> was false. <what happened>`; the operator needs only what happened.
 */
export function ortMessage(error: unknown): string {
  // Duck-typed: errors thrown by the native binding may come from another realm (instanceof Error fails there).
  const text = (error as { message?: unknown } | null)?.message;
  const message = (typeof text === 'string' ? text : String(error)).trim();
  const checked = /^\/onnxruntime_src\/\S+ .* was false\. ([\s\S]+)$/.exec(message);
  return checked ? checked[1]!.trim() : message;
}

/** Creates a session on the planned provider, falling back to CPU only when the device request allows it. */
export async function loadSession(modelPath: string, options: SessionOptions): Promise<LoadedSession> {
  const plan = planProviders(options.device, availableBackends());
  const failures: string[] = plan.fallbackReason === undefined ? [] : [plan.fallbackReason];
  for (const attempt of plan.attempts) {
    try {
      const session = await ort.InferenceSession.create(
        modelPath,
        sessionOptions(attempt, options.intraOpThreads),
      );
      const loaded: LoadedSession = {
        session,
        executionProvider: attempt.provider,
        deviceId: attempt.deviceId,
      };
      if (failures.length > 0) loaded.fallbackReason = failures.join('; ');
      return loaded;
    } catch (error) {
      const reason = `${attempt.provider}:${attempt.deviceId}: ${ortMessage(error)}`;
      if (attempt.provider === 'cpu' || plan.strict) {
        if (attempt.provider !== 'cpu')
          throw new DeviceError(`${providerLabel(attempt.provider)} session failed (${reason})`);
        throw error;
      }
      failures.push(reason);
    }
  }
  throw new DeviceError(`no execution provider could load ${modelPath}: ${failures.join('; ')}`);
}

const ORT_TYPE: Record<DType, string> = {
  float32: 'float32',
  float64: 'float64',
  int32: 'int32',
  int64: 'int64',
  uint8: 'uint8',
  bool: 'bool',
  string: 'string',
};

interface ValueMetadata {
  name: string;
  isTensor?: boolean;
  type?: string;
  shape?: ReadonlyArray<number | string>;
}

/**
 * Checks that config.json describes what the ONNX file really takes and returns: names, dtypes, ranks, and
 * fixed dims (the session's leading dim is the batch). Returns a list of problems (empty when they agree).
 */
export function compareSignature(signature: ModelSignature, session: ort.InferenceSession): string[] {
  const problems: string[] = [];
  const metadata = session as unknown as {
    inputMetadata?: ValueMetadata[];
    outputMetadata?: ValueMetadata[];
  };
  compareList('input', signature.inputs, session.inputNames, metadata.inputMetadata, problems);
  compareList('output', signature.outputs, session.outputNames, metadata.outputMetadata, problems);
  return problems;
}

function compareList(
  kind: string,
  specs: TensorSpec[],
  names: readonly string[],
  metadata: ValueMetadata[] | undefined,
  problems: string[],
): void {
  for (const spec of specs) {
    if (!names.includes(spec.name)) {
      problems.push(`${kind} "${spec.name}" is not in the model (it has ${names.join(', ')})`);
      continue;
    }
    const meta = metadata?.find((entry) => entry.name === spec.name);
    if (!meta?.shape || !meta.type) continue;
    if (meta.type !== ORT_TYPE[spec.dtype])
      problems.push(`${kind} "${spec.name}": config says ${spec.dtype}, model has ${meta.type}`);
    if (meta.shape.length !== spec.shape.length + 1) {
      problems.push(
        `${kind} "${spec.name}": config rank ${spec.shape.length} (+ batch) but model rank ${meta.shape.length}`,
      );
      continue;
    }
    spec.shape.forEach((dim, axis) => {
      const modelDim = meta.shape![axis + 1];
      if (dim !== -1 && typeof modelDim === 'number' && modelDim > 0 && modelDim !== dim) {
        problems.push(`${kind} "${spec.name}": dim ${axis} is ${dim} in config, ${modelDim} in model`);
      }
    });
  }
  if (kind === 'input') {
    for (const name of names) {
      if (!specs.some((spec) => spec.name === name))
        problems.push(`model input "${name}" is missing from config.json`);
    }
  }
}

export { ort };
