/**
 * Device selection, the one parser of it: `cpu`, `auto` (CUDA, then WebGPU, when available, else CPU with a
 * warning), `cuda` (= cuda:0, fatal when unavailable), `cuda:N`, `webgpu` (= webgpu:0, fatal when unavailable),
 * `webgpu:N` (N: adapter index), or a comma list giving one device per node (`cuda:0,cuda:1`, `webgpu:0,cpu`).
 * The setting is validated at start; the supervisor hands each node its own DeviceTarget, which libs/inference
 * takes as is.
 */
export type DeviceTarget =
  | { kind: 'cpu' }
  | { kind: 'auto'; deviceId: number }
  | { kind: 'cuda'; deviceId: number }
  | { kind: 'webgpu'; deviceId: number };

/** Largest GPU ordinal accepted (CUDA device or WebGPU adapter index). */
export const MAX_DEVICE_ID = 255;

/** Parses one entry; undefined when it is not a device. */
export function parseDeviceEntry(text: string): DeviceTarget | undefined {
  const value = text.trim().toLowerCase();
  if (value === 'cpu') return { kind: 'cpu' };
  if (value === 'auto') return { kind: 'auto', deviceId: 0 };
  const match = /^(cuda|webgpu)(?::(\d{1,3}))?$/.exec(value);
  if (!match) return undefined;
  const kind = match[1] as 'cuda' | 'webgpu';
  const deviceId = match[2] === undefined ? 0 : Number(match[2]);
  return deviceId <= MAX_DEVICE_ID ? { kind, deviceId } : undefined;
}

/** Parses a device setting (one entry or a comma list); undefined when any entry is invalid. */
export function parseDeviceList(text: string): DeviceTarget[] | undefined {
  const entries = text.split(',').map(parseDeviceEntry);
  if (entries.some((entry) => entry === undefined)) return undefined;
  return entries as DeviceTarget[];
}

export function formatDeviceTarget(target: DeviceTarget): string {
  return target.kind === 'cuda' || target.kind === 'webgpu'
    ? `${target.kind}:${target.deviceId}`
    : target.kind;
}

/** Canonical text of a device list: lower case, no spaces, `cuda` written as `cuda:0` (`webgpu` as `webgpu:0`). */
export function formatDeviceList(targets: readonly DeviceTarget[]): string {
  return targets.map(formatDeviceTarget).join(',');
}

/** One device per node: a single entry serves every node; a list must have exactly one entry per node. */
export function devicesPerNode(targets: readonly DeviceTarget[], nodes: number): DeviceTarget[] | undefined {
  if (targets.length === 1) return Array.from({ length: nodes }, () => ({ ...targets[0]! }));
  return targets.length === nodes ? targets.map((target) => ({ ...target })) : undefined;
}
