/**
 * Device selection, the one parser of it: `cpu`, `auto` (CUDA when available, else CPU with a warning), `cuda`
 * (= cuda:0, fatal when unavailable), `cuda:N`, or a comma list giving one device per node (`cuda:0,cuda:1`).
 * The setting is validated at start; the supervisor hands each node its own DeviceTarget, which libs/inference
 * takes as is.
 */
export type DeviceTarget =
  | { kind: 'cpu' }
  | { kind: 'auto'; deviceId: number }
  | { kind: 'cuda'; deviceId: number };

/** Largest CUDA ordinal accepted. */
export const MAX_CUDA_DEVICE = 255;

/** Parses one entry; undefined when it is not a device. */
export function parseDeviceEntry(text: string): DeviceTarget | undefined {
  const value = text.trim().toLowerCase();
  if (value === 'cpu') return { kind: 'cpu' };
  if (value === 'auto') return { kind: 'auto', deviceId: 0 };
  const match = /^cuda(?::(\d{1,3}))?$/.exec(value);
  if (!match) return undefined;
  const deviceId = match[1] === undefined ? 0 : Number(match[1]);
  return deviceId <= MAX_CUDA_DEVICE ? { kind: 'cuda', deviceId } : undefined;
}

/** Parses a device setting (one entry or a comma list); undefined when any entry is invalid. */
export function parseDeviceList(text: string): DeviceTarget[] | undefined {
  const entries = text.split(',').map(parseDeviceEntry);
  if (entries.some((entry) => entry === undefined)) return undefined;
  return entries as DeviceTarget[];
}

export function formatDeviceTarget(target: DeviceTarget): string {
  return target.kind === 'cuda' ? `cuda:${target.deviceId}` : target.kind;
}

/** Canonical text of a device list: lower case, no spaces, `cuda` written as `cuda:0`. */
export function formatDeviceList(targets: readonly DeviceTarget[]): string {
  return targets.map(formatDeviceTarget).join(',');
}

/** One device per node: a single entry serves every node; a list must have exactly one entry per node. */
export function devicesPerNode(targets: readonly DeviceTarget[], nodes: number): DeviceTarget[] | undefined {
  if (targets.length === 1) return Array.from({ length: nodes }, () => ({ ...targets[0]! }));
  return targets.length === nodes ? targets.map((target) => ({ ...target })) : undefined;
}
