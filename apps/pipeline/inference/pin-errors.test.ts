import { ProtocolError } from '../../../libs/protocol';
import { PipelineIoError } from '../errors';
import { ExternalInferenceError } from './errors';
import { unservedPinCode } from './pin-errors';

describe('unservedPinCode', () => {
  test('a model or version that does not exist, from either backend, and nothing else', () => {
    expect(unservedPinCode(new ProtocolError('unknown_version', 'no version 9'))).toBe('unknown_version');
    expect(unservedPinCode(new ProtocolError('unknown_model', 'no model x'))).toBe('unknown_model');
    expect(
      unservedPinCode(new ExternalInferenceError('not_served', 'x', { serverCode: 'unknown_model' })),
    ).toBe('unknown_model');
    expect(unservedPinCode(new ExternalInferenceError('not_served', 'x'))).toBe('unknown_version');
    for (const other of [
      new ProtocolError('reload_failed', 'corrupt'),
      new ExternalInferenceError('unreachable', 'down'),
      new PipelineIoError('publish_failed', 'x'),
      new Error('unknown_version'),
      'unknown_model',
    ])
      expect(unservedPinCode(other)).toBeUndefined();
  });
});
