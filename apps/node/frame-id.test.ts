import { encodeBinaryRequest } from '../../libs/protocol';
import { sniffFrameId } from './frame-id';

const encoder = new TextEncoder();
const text = (value: string): ArrayBuffer => encoder.encode(value).buffer as ArrayBuffer;

describe('the id of a frame that is not decoded', () => {
  test('numbers and strings in JSON text, wherever "id" is in the first bytes', () => {
    expect(sniffFrameId(text('{"id": 7, "model": "x"}'), false)).toBe(7);
    expect(sniffFrameId(text('{"model":"x","id" : "abc-1","input":[1]}'), false)).toBe('abc-1');
    expect(sniffFrameId(text('{"id":-2.5e1}'), false)).toBe(-25);
    expect(sniffFrameId(text('{"id":123456789012}'), false)).toBe(123456789012);
    expect(sniffFrameId(text('{"id":"é"}'), false)).toBe('é');
  });

  test('null when it is not cheaply readable', () => {
    for (const frame of [
      'x',
      '',
      '{"id":',
      '{"id":"a\\"b"}',
      '{"id":{"x":1}}',
      '{"idx":1}',
      '{"id":"unterminated',
    ])
      expect(sniffFrameId(text(frame), false)).toBeNull();
    expect(sniffFrameId(text(`{"input":[${'1,'.repeat(200)}1],"id":5}`), false)).toBeNull();
  });

  test('a binary frame: the id of its JSON header', () => {
    const frame = encodeBinaryRequest({ id: 'bin-3', model: 'echo' }, [
      { name: 'input', dtype: 'float32', dims: [1], data: Float32Array.of(1) },
    ]);
    expect(
      sniffFrameId(
        frame.buffer.slice(frame.byteOffset, frame.byteOffset + frame.byteLength) as ArrayBuffer,
        true,
      ),
    ).toBe('bin-3');
    expect(sniffFrameId(new ArrayBuffer(3), true)).toBeNull();
  });
});
