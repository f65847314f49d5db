/**
 * Which execution provider a session should use, decided before touching ONNX Runtime (pure, unit-tested). The
 * device itself is parsed once, by libs/config (the `device` setting); this module only consumes it.
 */
import type { DeviceTarget } from '../config';

export type ExecutionProviderName = 'cpu' | 'cuda';

export interface ProviderAttempt {
  provider: ExecutionProviderName;
  deviceId: number;
}

export interface ProviderPlan {
  attempts: ProviderAttempt[];
  /** When true, failing every GPU attempt is fatal instead of falling back to CPU. */
  strict: boolean;
  /** Why `auto` goes to CPU without even trying CUDA: reported like a failed CUDA attempt would be. */
  fallbackReason?: string;
}

const NO_CUDA_BACKEND = 'this onnxruntime-node build has no CUDA backend';

export class DeviceError extends Error {
  readonly code = 'ERR_DEVICE';
  constructor(message: string) {
    super(message);
    this.name = 'DeviceError';
  }
}

/**
 * `cpu` → CPU only. `cuda[:N]` → CUDA on device N, fatal when unavailable. `auto` → CUDA on device N when the
 * binding offers it and a session loads there, else CPU with the reason (the caller logs it so it is visible).
 */
export function planProviders(device: DeviceTarget, availableBackends: readonly string[]): ProviderPlan {
  const cudaListed = availableBackends.includes('cuda');
  switch (device.kind) {
    case 'cpu':
      return { attempts: [{ provider: 'cpu', deviceId: 0 }], strict: true };
    case 'cuda':
      if (!cudaListed) throw new DeviceError(`--device cuda:${device.deviceId}: ${NO_CUDA_BACKEND}`);
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
        : {
            attempts: [{ provider: 'cpu', deviceId: 0 }],
            strict: false,
            fallbackReason: `cuda:${device.deviceId}: ${NO_CUDA_BACKEND}`,
          };
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
