/** `upper` v1: ONNX StringNormalizer(UPPER, locale "C") on a string per item. */
import type { ModelConfig } from './config';
import { encodeModel, model, node } from './onnx-builder';
import { type BuiltModel, valueInfo } from './types';

export function buildUpper(): BuiltModel {
  const config: ModelConfig = {
    name: 'upper',
    description: 'Uppercases ASCII letters of a string (ONNX StringNormalizer, locale C)',
    inputs: [{ name: 'text', dtype: 'string', shape: [] }],
    outputs: [{ name: 'text_out', dtype: 'string', shape: [] }],
    // No objective: stays greedy even when the operator sets one for every model.
    batching: { policy: 'greedy' },
    default_version: '1',
  };
  const bytes = encodeModel(
    model({
      docString: config.description,
      graph: {
        name: 'upper',
        // The batch tensor is [N]: StringNormalizer's 1-D [C] form.
        inputs: [valueInfo(config.inputs[0]!)],
        outputs: [valueInfo(config.outputs[0]!)],
        nodes: [
          node('StringNormalizer', ['text'], ['text_out'], {
            case_change_action: 'UPPER',
            // Explicit: hosts often lack en_US. With "C", only ASCII letters change case.
            locale: 'C',
            is_case_sensitive: { int: 1 },
          }),
        ],
      },
    }),
  );
  return { config, versions: { '1': bytes }, summary: ['upper v1: StringNormalizer(UPPER, locale C)'] };
}
