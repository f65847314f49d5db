/**
 * Jest runs each test file in its own vm context whose typed-array constructors differ from the main Node
 * realm's. onnxruntime-node creates tensor data in the main realm and onnxruntime-common checks
 * `data instanceof Float32Array` against the test context's constructor, so numeric outputs would fail
 * inside jest only. Give the test context the main realm's constructors, as production code has.
 */
const { TestEnvironment } = require('jest-environment-node');

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
  'ArrayBuffer',
  'SharedArrayBuffer',
  'DataView',
];

class NodeRealmEnvironment extends TestEnvironment {
  constructor(config, context) {
    super(config, context);
    for (const name of TYPED_ARRAYS) this.global[name] = globalThis[name];
  }
}

module.exports = NodeRealmEnvironment;
