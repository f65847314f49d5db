import type { TensorSpec } from '../../libs/protocol';
import type { ModelConfig } from './config';
import { type Dim, tensorValueInfo } from './onnx-builder';

/** What a model builder produces: the config, one ONNX file per version, extra files, a summary. */
export interface BuiltModel {
  config: ModelConfig;
  /** version → model.onnx bytes. */
  versions: Record<string, Uint8Array>;
  /** Extra files written under models/<name>/ (e.g. README.md), path → content. */
  files?: Record<string, string>;
  /** Human-readable summary lines printed by build-models. */
  summary: string[];
}

/**
 * ONNX value info for a config tensor: leading symbolic `batch` dim, then the config's
 * shape with each dynamic (-1) dim named `<dynName>` (default `<name>_len`, or `<name>_len<i>`
 * when there are several).
 */
export function valueInfo(t: TensorSpec, dynName?: string): ReturnType<typeof tensorValueInfo> {
  const dynCount = t.shape.filter((d) => d === -1).length;
  let k = 0;
  const dims: Dim[] = [
    'batch',
    ...t.shape.map((d) => {
      if (d !== -1) return d;
      const base = dynName ?? `${t.name}_len`;
      return dynCount === 1 ? base : `${base}${k++}`;
    }),
  ];
  return tensorValueInfo(t.name, t.dtype, dims);
}
