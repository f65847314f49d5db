import { authorizeAdmin, isLoopbackAddress } from './admin-auth';

test.each([
  ['127.0.0.1', true],
  ['127.1.2.3', true],
  ['::1', true],
  ['0000:0000:0000:0000:0000:0000:0000:0001', true],
  ['0000:0000:0000:0000:0000:ffff:7f00:0001', true],
  ['::ffff:127.0.0.1', true],
  ['10.0.0.1', false],
  ['192.168.1.5', false],
  ['0000:0000:0000:0000:0000:ffff:0a00:0001', false],
  ['fe80::1', false],
])('isLoopbackAddress(%s) = %s', (address, expected) => {
  expect(isLoopbackAddress(address)).toBe(expected);
});

test('without a token only loopback clients pass', () => {
  expect(authorizeAdmin(undefined, '127.0.0.1', '').ok).toBe(true);
  expect(authorizeAdmin(undefined, '10.1.1.1', 'Bearer x').ok).toBe(false);
});

test('with a token, every client must present it', () => {
  expect(authorizeAdmin('t0k', '127.0.0.1', '').ok).toBe(false);
  expect(authorizeAdmin('t0k', '10.1.1.1', 'Bearer t0k').ok).toBe(true);
  expect(authorizeAdmin('t0k', '10.1.1.1', 'bearer   t0k').ok).toBe(true);
  expect(authorizeAdmin('t0k', '10.1.1.1', 'Bearer t0kk').ok).toBe(false);
  expect(authorizeAdmin('t0k', '10.1.1.1', 'Basic t0k').ok).toBe(false);
});

test('without a token, a proxied request (X-Forwarded-For or Forwarded) is refused even from loopback', () => {
  const viaProxy = authorizeAdmin(undefined, '127.0.0.1', '', { forwardedFor: '203.0.113.7' });
  expect(viaProxy.ok).toBe(false);
  expect(!viaProxy.ok && viaProxy.reason).toMatch(/proxy.*X-Forwarded-For.*admin token/);
  expect(authorizeAdmin(undefined, '::1', '', { forwarded: 'for=203.0.113.7;proto=https' }).ok).toBe(false);
  expect(authorizeAdmin(undefined, '127.0.0.1', '', { forwardedFor: '', forwarded: '' }).ok).toBe(true);
});

test('with a token, a proxied request that sends it is served; one that does not is refused', () => {
  const proxy = { forwardedFor: '203.0.113.7', forwarded: 'for=203.0.113.7' };
  expect(authorizeAdmin('t0k', '127.0.0.1', 'Bearer t0k', proxy).ok).toBe(true);
  expect(authorizeAdmin('t0k', '127.0.0.1', '', proxy).ok).toBe(false);
});
