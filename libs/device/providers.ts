/**
 * Which execution provider a session should use, decided before touching ONNX Runtime (pure, unit-tested). The
 * device itself is parsed once, by libs/config (the `device` setting); this module only consumes it.
 */
import type { DeviceTarget } from '../config';
import { DeviceError } from './errors';

export type ExecutionProviderName = 'cpu' | 'cuda' | 'webgpu';

/** The GPU providers, in the order `auto` tries them: CUDA is the native path; WebGPU (Dawn over Vulkan) next. */
export type GpuProviderName = Exclude<ExecutionProviderName, 'cpu'>;
const AUTO_ORDER: readonly GpuProviderName[] = ['cuda', 'webgpu'];
const PROVIDER_LABEL: Record<GpuProviderName, string> = { cuda: 'CUDA', webgpu: 'WebGPU' };

export interface ProviderAttempt {
  provider: ExecutionProviderName;
  deviceId: number;
}

export interface ProviderPlan {
  attempts: ProviderAttempt[];
  /** When true, failing every GPU attempt is fatal instead of falling back to CPU. */
  strict: boolean;
  /** Why `auto` skips a GPU provider without even trying it: reported like a failed attempt would be. */
  fallbackReason?: string;
}

/** Why a GPU provider cannot be tried at all on this binding; undefined when it can. */
function unusable(
  provider: GpuProviderName,
  deviceId: number,
  backends: readonly string[],
): string | undefined {
  if (!backends.includes(provider))
    return `this onnxruntime-node build has no ${PROVIDER_LABEL[provider]} backend`;
  // The binding's WebGPU provider asks Dawn for its default adapter; its own deviceId names a context that needs
  // an external WebGPU device, which Node cannot hand it. So only adapter 0 is reachable.
  if (provider === 'webgpu' && deviceId !== 0)
    return 'this onnxruntime-node build opens only the default WebGPU adapter (webgpu:0)';
  return undefined;
}

/**
 * `cpu` → CPU only. `cuda[:N]` / `webgpu[:N]` → that provider on device (adapter) N, fatal when unavailable.
 * `auto` → CUDA, then WebGPU, on device N when the binding offers them and a session loads there, else CPU with
 * the reasons (the caller logs them so they are visible).
 */
export function planProviders(device: DeviceTarget, availableBackends: readonly string[]): ProviderPlan {
  switch (device.kind) {
    case 'cpu':
      return { attempts: [{ provider: 'cpu', deviceId: 0 }], strict: true };
    case 'cuda':
    case 'webgpu': {
      const reason = unusable(device.kind, device.deviceId, availableBackends);
      if (reason) throw new DeviceError(`--device ${device.kind}:${device.deviceId}: ${reason}`);
      return { attempts: [{ provider: device.kind, deviceId: device.deviceId }], strict: true };
    }
    case 'auto': {
      const attempts: ProviderAttempt[] = [];
      const skipped: string[] = [];
      for (const provider of AUTO_ORDER) {
        const reason = unusable(provider, device.deviceId, availableBackends);
        if (reason) skipped.push(`${provider}:${device.deviceId}: ${reason}`);
        else attempts.push({ provider, deviceId: device.deviceId });
      }
      attempts.push({ provider: 'cpu', deviceId: 0 });
      const plan: ProviderPlan = { attempts, strict: false };
      if (skipped.length > 0) plan.fallbackReason = skipped.join('; ');
      return plan;
    }
  }
}

/** The label a failed session names its provider by (`CUDA session failed`). */
export function providerLabel(provider: GpuProviderName): string {
  return PROVIDER_LABEL[provider];
}

/**
 * Intra-op threads per session: each node's gateway thread keeps a core of its own (it parses and encodes
 * every request), and the worker threads of all nodes share the rest.
 */
export function defaultIntraOpThreads(cores: number, workersPerNode: number, nodes = 1): number {
  const forModels = Math.max(1, cores - nodes);
  return Math.max(1, Math.floor(forModels / Math.max(1, workersPerNode * nodes)));
}
