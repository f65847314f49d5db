import { execFileSync } from 'node:child_process';
import { answeredSubprotocol, bearerKey, clampPriority, hashKey, subprotocolKey } from './index';

describe('presented keys', () => {
  it('reads a bearer key, case-insensitive scheme; refuses other schemes and odd characters', () => {
    expect(bearerKey('Bearer sk_abc123')).toBe('sk_abc123');
    expect(bearerKey('bearer sk_abc123')).toBe('sk_abc123');
    expect(bearerKey('')).toBeUndefined();
    expect(bearerKey('Basic dXNlcjpwYXNz')).toBeUndefined();
    expect(bearerKey('Bearer a b')).toBeUndefined();
    expect(bearerKey(`Bearer ${'a'.repeat(600)}`)).toBeUndefined();
  });

  it('reads the browser form from the subprotocol list and never answers it', () => {
    expect(subprotocolKey('streaminfer, bearer.sk_abc123')).toBe('sk_abc123');
    expect(subprotocolKey('streaminfer')).toBeUndefined();
    expect(answeredSubprotocol('streaminfer, bearer.sk_abc123')).toBe('streaminfer');
    expect(answeredSubprotocol('bearer.sk_abc123')).toBe('');
    // No key in the list: answered as before.
    expect(answeredSubprotocol('chat')).toBe('chat');
    expect(answeredSubprotocol('')).toBe('');
  });

  it('hashes like the README recipe (printf %s "$key" | sha256sum)', () => {
    const key = 'sk_0123456789abcdef';
    const viaShell = execFileSync('sh', ['-c', `printf %s '${key}' | sha256sum | cut -d' ' -f1`])
      .toString()
      .trim();
    expect(hashKey(key)).toBe(viaShell);
  });

  it('clamps a priority to the tenant ceiling', () => {
    expect(clampPriority('high', 'normal')).toBe('normal');
    expect(clampPriority('low', 'normal')).toBe('low');
    expect(clampPriority('high', 'high')).toBe('high');
    expect(clampPriority('normal', 'low')).toBe('low');
  });
});
