/**
 * Jest runs each test file in its own vm context whose typed-array constructors differ from the main Node
 * realm's. onnxruntime-node creates tensor data in the main realm and onnxruntime-common checks
 * `data instanceof Float32Array` against the test context's constructor, so numeric outputs would fail
 * inside jest only. Give the test context the main realm's constructors, as production code has.
 *
 * The context is made with vm.constants.DONT_CONTEXTIFY (Node >= 20.18) where Node has it: an ordinary global
 * object instead of one behind V8 interceptors. In a contextified context every global read (Math, Number,
 * JSON, Date...) calls into C++, which made CPU-bound suites 3 to 6 times slower under jest than in Node
 * (haversineKm's Math.sin in the decider tests, the brute-force digit counts of float32-text.test.ts). The test
 * file still gets a global of its own, and jest's environment sets it up the same way.
 */
const vm = require('node:vm');
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

const DONT_CONTEXTIFY = vm.constants?.DONT_CONTEXTIFY;

class NodeRealmEnvironment extends TestEnvironment {
  constructor(config, context) {
    // jest-environment-node calls vm.createContext() with no argument in its constructor, synchronously: for
    // that call only, ask for an uncontextified global.
    const createContext = vm.createContext;
    if (DONT_CONTEXTIFY !== undefined)
      vm.createContext = (contextObject) => createContext(contextObject ?? DONT_CONTEXTIFY);
    try {
      super(config, context);
    } finally {
      vm.createContext = createContext;
    }
    for (const name of TYPED_ARRAYS) this.global[name] = globalThis[name];
  }
}

module.exports = NodeRealmEnvironment;
