/** Which execution provider a session should use, decided before touching ONNX Runtime (pure, unit-tested). */
export type DeviceRequest =
  | { kind: 'cpu' }
  | { kind: 'auto'; deviceId: number }
  | { kind: 'cuda'; deviceId: number };

export type ExecutionProviderName = 'cpu' | 'cuda';

export interface ProviderAttempt {
  provider: ExecutionProviderName;
  deviceId: number;
}

export interface ProviderPlan {
  attempts: ProviderAttempt[];
  /** When true, failing every GPU attempt is fatal instead of falling back to CPU. */
  strict: boolean;
}

export class DeviceError extends Error {
  readonly code = 'ERR_DEVICE';
  constructor(message: string) {
    super(message);
    this.name = 'DeviceError';
  }
}

/** Parses `cpu`, `auto`, `cuda`, `cuda:N`. A comma list is split by the caller (one entry per node). */
export function parseDevice(text: string): DeviceRequest {
  const value = text.trim().toLowerCase();
  if (value === 'cpu') return { kind: 'cpu' };
  if (value === 'auto') return { kind: 'auto', deviceId: 0 };
  const match = /^cuda(?::(\d{1,3}))?$/.exec(value);
  if (match) return { kind: 'cuda', deviceId: match[1] === undefined ? 0 : Number(match[1]) };
  throw new DeviceError(`unknown device "${text}": expected cpu, auto, cuda or cuda:N`);
}

export function formatDevice(device: DeviceRequest): string {
  return device.kind === 'cpu' ? 'cpu' : device.kind === 'auto' ? 'auto' : `cuda:${device.deviceId}`;
}

/** Devices for each node: one entry repeats for every node; a list must name one device per node. */
export function devicesForNodes(text: string, nodes: number): DeviceRequest[] {
  const entries = text.split(',').map((entry) => parseDevice(entry));
  if (entries.length === 1) return Array.from({ length: nodes }, () => entries[0]!);
  if (entries.length !== nodes) {
    throw new DeviceError(
      `--device lists ${entries.length} devices for ${nodes} nodes: give one device, or one per node`,
    );
  }
  return entries;
}

/**
 * `cpu` → CPU only. `cuda[:N]` → CUDA on device N, fatal when unavailable. `auto` → CUDA on device N when the
 * binding offers it, else CPU (the caller logs the fallback so it is visible).
 */
export function planProviders(device: DeviceRequest, availableBackends: readonly string[]): ProviderPlan {
  const cudaListed = availableBackends.includes('cuda');
  switch (device.kind) {
    case 'cpu':
      return { attempts: [{ provider: 'cpu', deviceId: 0 }], strict: true };
    case 'cuda':
      if (!cudaListed)
        throw new DeviceError('--device cuda: this onnxruntime-node build has no CUDA backend');
      return { attempts: [{ provider: 'cuda', deviceId: device.deviceId }], strict: true };
    case 'auto':
      return cudaListed
        ? {
            attempts: [
              { provider: 'cuda', deviceId: device.deviceId },
              { provider: 'cpu', deviceId: 0 },
            ],
            strict: false,
          }
        : { attempts: [{ provider: 'cpu', deviceId: 0 }], strict: false };
  }
}

/**
 * Intra-op threads per session: each node's gateway thread keeps a core of its own (it parses and encodes
 * every request), and the worker threads of all nodes share the rest.
 */
export function defaultIntraOpThreads(cores: number, workersPerNode: number, nodes = 1): number {
  const forModels = Math.max(1, cores - nodes);
  return Math.max(1, Math.floor(forModels / Math.max(1, workersPerNode * nodes)));
}
