import { createHash } from 'node:crypto';
import { MAX_TENANTS, parseTenantFile, TenantFileError } from './index';

const digest = (key: string): string => createHash('sha256').update(key).digest('hex');
const A = digest('key-a');
const B = digest('key-b');

function errorOf(document: unknown): string {
  try {
    parseTenantFile(document, '/etc/keys.json');
  } catch (error) {
    expect(error).toBeInstanceOf(TenantFileError);
    return (error as Error).message;
  }
  throw new Error('expected a TenantFileError');
}

describe('parseTenantFile', () => {
  it('reads tenants with their limits, defaults burst and priority ceiling', () => {
    const specs = parseTenantFile(
      {
        tenants: {
          acme: { keys: [A.toUpperCase()], rateLimitRps: 200, maxConnections: 8, models: ['digits'] },
          beta: {
            keys: [B],
            rateLimitRps: 0,
            rateLimitBurst: 5,
            maxConnections: 0,
            models: '*',
            maxPriority: 'low',
          },
        },
      },
      'keys.json',
    );
    expect(specs).toEqual([
      {
        name: 'acme',
        keyHashes: [A],
        rateLimitRps: 200,
        rateLimitBurst: 200,
        maxConnections: 8,
        models: ['digits'],
        maxPriority: 'high',
      },
      {
        name: 'beta',
        keyHashes: [B],
        rateLimitRps: 0,
        rateLimitBurst: 0,
        maxConnections: 0,
        models: '*',
        maxPriority: 'low',
      },
    ]);
  });

  const good = { keys: [A], rateLimitRps: 10, maxConnections: 2, models: '*' };
  it.each([
    [[], /\/etc\/keys.json: the file: expected a JSON object/],
    [{ tenants: {}, extra: 1 }, /extra: unknown field/],
    [{ tenants: {} }, /tenants: no tenant/],
    [{ tenants: { 'bad name': good } }, /tenants\.bad name: a tenant name is/],
    [{ tenants: { acme: { ...good, rps: 1 } } }, /tenants\.acme\.rps: unknown field/],
    [{ tenants: { acme: { ...good, keys: [] } } }, /tenants\.acme\.keys: expected a non-empty array/],
    [{ tenants: { acme: { ...good, keys: ['sk_0123'] } } }, /tenants\.acme\.keys\[0\]: expected the SHA-256/],
    [
      { tenants: { acme: { ...good, keys: [A, A] } } },
      /tenants\.acme\.keys\[1\]: this digest is listed twice/,
    ],
    [
      { tenants: { acme: good, beta: { ...good } } },
      /tenants\.beta\.keys\[0\]: this digest also belongs to tenant "acme"/,
    ],
    [{ tenants: { acme: { ...good, rateLimitRps: -1 } } }, /tenants\.acme\.rateLimitRps: expected/],
    [{ tenants: { acme: { ...good, rateLimitRps: '5' } } }, /tenants\.acme\.rateLimitRps: expected/],
    [{ tenants: { acme: { ...good, rateLimitBurst: 0 } } }, /tenants\.acme\.rateLimitBurst: expected/],
    [
      { tenants: { acme: { ...good, maxConnections: 1.5 } } },
      /tenants\.acme\.maxConnections: expected an integer/,
    ],
    [{ tenants: { acme: { ...good, models: [] } } }, /tenants\.acme\.models: expected "\*"/],
    [{ tenants: { acme: { ...good, models: undefined } } }, /tenants\.acme\.models: expected "\*"/],
    [
      { tenants: { acme: { ...good, maxPriority: 'urgent' } } },
      /tenants\.acme\.maxPriority: expected one of low, normal, high/,
    ],
  ])('refuses %j naming the entry', (document, message) => {
    expect(errorOf(document)).toMatch(message);
  });

  it('bounds the number of tenants (a metrics label)', () => {
    const tenants = Object.fromEntries(
      Array.from({ length: MAX_TENANTS + 1 }, (_, i) => [`t${i}`, { ...good, keys: [digest(`k${i}`)] }]),
    );
    expect(errorOf({ tenants })).toMatch(/65 tenants; at most 64/);
  });
});
