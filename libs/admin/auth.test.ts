import { authorizeAdmin, checkAdminRequest, isLoopbackHost, parseAllowedOrigins } from './auth';
import { bearerToken, sameToken } from './token';

describe('sameToken: SHA-256 digests compared in constant time', () => {
  test('the same token matches; any other does not, whatever its length', () => {
    const token = 'a-long-random-admin-token-0123456789';
    expect(sameToken(token, token)).toBe(true);
    for (const other of [
      '',
      'a',
      token.slice(0, -1),
      `${token}x`,
      token.toUpperCase(),
      `${token.slice(0, -1)}8`,
    ])
      expect(sameToken(token, other)).toBe(false);
  });

  test('an empty expected token matches nothing (not even an empty one)', () => {
    expect(sameToken('', '')).toBe(false);
  });

  test('bearerToken reads the Bearer scheme only', () => {
    expect(bearerToken('Bearer t0k')).toBe('t0k');
    expect(bearerToken('bearer   t0k ')).toBe('t0k');
    expect(bearerToken('Basic t0k')).toBe('');
    expect(bearerToken('Bearer a b')).toBe('');
    expect(bearerToken('')).toBe('');
  });
});

test('without a token every caller passes (the listener is loopback or a unix socket)', () => {
  expect(authorizeAdmin(undefined, '').ok).toBe(true);
  expect(authorizeAdmin(undefined, 'Bearer x').ok).toBe(true);
});

test('with a token, every caller must present it: its address is not asked', () => {
  expect(authorizeAdmin('t0k', '').ok).toBe(false);
  expect(authorizeAdmin('t0k', 'Bearer t0k').ok).toBe(true);
  expect(authorizeAdmin('t0k', 'bearer   t0k').ok).toBe(true);
  expect(authorizeAdmin('t0k', 'Bearer t0kk').ok).toBe(false);
  expect(authorizeAdmin('t0k', 'Bearer t0').ok).toBe(false);
  expect(authorizeAdmin('t0k', 'Basic t0k').ok).toBe(false);
});

test('without a token, a proxied request (X-Forwarded-For or Forwarded) is refused', () => {
  const viaProxy = authorizeAdmin(undefined, '', { forwardedFor: '203.0.113.7' });
  expect(viaProxy.ok).toBe(false);
  expect(!viaProxy.ok && viaProxy.reason).toMatch(/proxy.*X-Forwarded-For.*admin token/);
  expect(authorizeAdmin(undefined, '', { forwarded: 'for=203.0.113.7;proto=https' }).ok).toBe(false);
  expect(authorizeAdmin(undefined, '', { forwardedFor: '', forwarded: '' }).ok).toBe(true);
});

test('with a token, a proxied request that sends it is served; one that does not is refused', () => {
  const proxy = { forwardedFor: '203.0.113.7', forwarded: 'for=203.0.113.7' };
  expect(authorizeAdmin('t0k', 'Bearer t0k', proxy).ok).toBe(true);
  expect(authorizeAdmin('t0k', '', proxy).ok).toBe(false);
});

describe('checkAdminRequest: CSRF and DNS rebinding', () => {
  const loopback = { token: undefined, allowedOrigins: [] as string[] };
  const withToken = { token: 't0k-t0k-t0k', allowedOrigins: [] as string[] };
  const post = {
    method: 'POST',
    authorization: '',
    host: '127.0.0.1:8000',
    origin: '',
    contentType: 'application/json',
  };
  const get = { ...post, method: 'GET', contentType: '' };
  const codeOf = (decision: ReturnType<typeof checkAdminRequest>) => (decision.ok ? 'ok' : decision.code);

  test('a loopback JSON POST with a loopback Host and no Origin passes', () => {
    expect(checkAdminRequest(loopback, post)).toEqual({ ok: true });
    expect(checkAdminRequest(loopback, get)).toEqual({ ok: true });
  });

  test.each([
    ['localhost', true],
    ['localhost:8000', true],
    ['LOCALHOST:8000', true],
    ['127.0.0.1', true],
    ['127.3.4.5:9', true],
    ['[::1]', true],
    ['[::1]:8000', true],
    ['evil.example', false],
    ['evil.example:8000', false],
    ['localhost.evil.example', false],
    ['127.0.0.1.evil.example', false],
    ['127.0.0.256', false],
    ['[::2]:8000', false],
    ['localhost:8000:1', false],
    ['localhost:', false],
    ['localhost:x', false],
    ['', false],
  ])('isLoopbackHost(%j) = %s', (host, expected) => {
    expect(isLoopbackHost(host)).toBe(expected);
  });

  test('without a token a non-loopback Host (DNS rebinding) is 403 forbidden, GET and POST', () => {
    for (const request of [post, get]) {
      const decision = checkAdminRequest(loopback, { ...request, host: 'evil.example:8000' });
      expect(codeOf(decision)).toBe('forbidden');
      expect(!decision.ok && decision.reason).toMatch(/Host/);
      expect(codeOf(checkAdminRequest(loopback, { ...request, host: '' }))).toBe('forbidden');
    }
  });

  test('with a token the Host is not checked (the token is what a rebinding page cannot have)', () => {
    const authorized = { ...post, authorization: 'Bearer t0k-t0k-t0k', host: 'admin.example:8000' };
    expect(checkAdminRequest(withToken, authorized)).toEqual({ ok: true });
    expect(checkAdminRequest(withToken, { ...get, authorization: 'Bearer t0k-t0k-t0k', host: 'x' })).toEqual({
      ok: true,
    });
  });

  test('a cross-origin simple request (text/plain, Origin) is refused', () => {
    const csrf = { ...post, contentType: 'text/plain;charset=UTF-8', origin: 'http://evil.example' };
    expect(codeOf(checkAdminRequest(loopback, csrf))).toBe('forbidden');
    expect(codeOf(checkAdminRequest(loopback, { ...csrf, origin: '' }))).toBe('unsupported_media_type');
  });

  test('any Origin on a mutating request is 403 unless allowed; GET without a token too', () => {
    expect(codeOf(checkAdminRequest(loopback, { ...post, origin: 'http://evil.example' }))).toBe('forbidden');
    expect(codeOf(checkAdminRequest(loopback, { ...post, origin: 'null' }))).toBe('forbidden');
    expect(codeOf(checkAdminRequest(loopback, { ...get, origin: 'http://evil.example' }))).toBe('forbidden');
    const tokenPost = { ...post, authorization: 'Bearer t0k-t0k-t0k', origin: 'http://evil.example' };
    expect(codeOf(checkAdminRequest(withToken, tokenPost))).toBe('forbidden');
    // a token GET from a page cannot carry the token without a preflight: Origin is not checked there
    expect(codeOf(checkAdminRequest(withToken, { ...tokenPost, method: 'GET', contentType: '' }))).toBe('ok');
    const allowed = { token: undefined, allowedOrigins: ['https://admin.example'] };
    expect(codeOf(checkAdminRequest(allowed, { ...post, origin: 'https://admin.example' }))).toBe('ok');
    expect(codeOf(checkAdminRequest(allowed, { ...post, origin: 'HTTPS://ADMIN.EXAMPLE' }))).toBe('ok');
    expect(codeOf(checkAdminRequest(allowed, { ...post, origin: 'https://admin.example:444' }))).toBe(
      'forbidden',
    );
  });

  test('mutating requests need Content-Type application/json (parameters allowed), else 415', () => {
    for (const method of ['POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS']) {
      expect(codeOf(checkAdminRequest(loopback, { ...post, method, contentType: '' }))).toBe(
        'unsupported_media_type',
      );
      expect(codeOf(checkAdminRequest(loopback, { ...post, method, contentType: 'text/plain' }))).toBe(
        'unsupported_media_type',
      );
    }
    for (const contentType of [
      'multipart/form-data; boundary=x',
      'application/x-www-form-urlencoded',
      'application/jsonp',
      'application/json-seq',
    ])
      expect(codeOf(checkAdminRequest(loopback, { ...post, contentType }))).toBe('unsupported_media_type');
    for (const contentType of ['application/json', 'Application/JSON', 'application/json; charset=utf-8'])
      expect(codeOf(checkAdminRequest(loopback, { ...post, contentType }))).toBe('ok');
    expect(codeOf(checkAdminRequest(loopback, { ...get, method: 'HEAD' }))).toBe('ok');
  });

  test('authentication is decided first: 401 before any other check', () => {
    expect(codeOf(checkAdminRequest(withToken, { ...post, contentType: '' }))).toBe('unauthorized');
    expect(codeOf(checkAdminRequest(withToken, { ...post, host: 'evil.example', contentType: '' }))).toBe(
      'unauthorized',
    );
    expect(codeOf(checkAdminRequest(loopback, { ...post, forwardedFor: '203.0.113.7' }))).toBe(
      'unauthorized',
    );
  });
});

describe('parseAllowedOrigins', () => {
  test('a comma-separated list of origins, normalised', () => {
    expect(parseAllowedOrigins(undefined)).toEqual([]);
    expect(parseAllowedOrigins('https://a.example, HTTP://B.example:8080')).toEqual([
      'https://a.example',
      'http://b.example:8080',
    ]);
  });
});
