/** `echo` v1: two optional inputs, each passed through an Identity node. */
import type { ModelConfig } from './config';
import { encodeModel, model, node } from './onnx-builder';
import { type BuiltModel, valueInfo } from './types';

export function buildEcho(): BuiltModel {
  const config: ModelConfig = {
    name: 'echo',
    description: 'Identity: echoes a float32 vector (input → output) and/or a string (text → text_out)',
    inputs: [
      { name: 'input', dtype: 'float32', shape: [-1], optional: true },
      { name: 'text', dtype: 'string', shape: [], optional: true },
    ],
    outputs: [
      { name: 'output', dtype: 'float32', shape: [-1], from: 'input' },
      { name: 'text_out', dtype: 'string', shape: [], from: 'text' },
    ],
    // No objective: stays greedy even when the operator sets one for every model.
    batching: { policy: 'greedy' },
    default_version: '1',
  };
  const [input, text] = config.inputs as [ModelConfig['inputs'][0], ModelConfig['inputs'][0]];
  const [output, textOut] = config.outputs as [ModelConfig['outputs'][0], ModelConfig['outputs'][0]];
  const bytes = encodeModel(
    model({
      docString: config.description,
      graph: {
        name: 'echo',
        inputs: [valueInfo(input, 'len'), valueInfo(text)],
        outputs: [valueInfo(output, 'len'), valueInfo(textOut)],
        nodes: [node('Identity', ['input'], ['output']), node('Identity', ['text'], ['text_out'])],
      },
    }),
  );
  return {
    config,
    versions: { '1': bytes },
    summary: ['echo v1: Identity × 2 (input → output, text → text_out)'],
  };
}
