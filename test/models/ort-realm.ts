/**
 * Import this FIRST in any jest test that runs onnxruntime-node.
 *
 * Jest runs each test file in its own vm context, whose typed-array constructors differ from
 * the main Node realm's (jest shares only Uint8Array). The onnxruntime-node binding creates
 * output data in the main realm, and onnxruntime-common (loaded inside the test context)
 * checks `data instanceof Float32Array` against the test context's constructor, so every
 * numeric output fails with "A float32 tensor's data must be type of function Float32Array".
 * Making the test context use the main realm's constructors restores what production code
 * sees. (Project-wide alternative: a custom jest testEnvironment doing the same.)
 */
import * as vm from 'node:vm';

const TYPED_ARRAYS = [
  'Int8Array',
  'Uint8Array',
  'Uint8ClampedArray',
  'Int16Array',
  'Uint16Array',
  'Int32Array',
  'Uint32Array',
  'Float32Array',
  'Float64Array',
  'BigInt64Array',
  'BigUint64Array',
] as const;

const g = globalThis as unknown as Record<string, unknown>;
for (const name of TYPED_ARRAYS) {
  const mainRealm: unknown = vm.runInThisContext(name);
  if (g[name] !== mainRealm) g[name] = mainRealm;
}
