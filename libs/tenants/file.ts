/**
 * The API keys file (`--api-keys FILE`): tenants, each with the SHA-256 digests of its keys and its limits.
 * Validated whole and strictly (unknown fields refused, every bad entry named); pure: the caller reads the
 * file and names it.
 *
 * {"tenants": {"acme": {"keys": ["<sha256 hex of a key>", …], "rateLimitRps": 200, "rateLimitBurst": 400,
 *   "maxConnections": 50, "models": ["digits", "upper"] | "*", "maxPriority": "normal"}}}
 */
import { PRIORITIES, type Priority } from '../protocol';
import { TenantFileError } from './errors';

/** Tenants a file may hold: their names are a metrics label, so the label's values stay bounded. */
export const MAX_TENANTS = 64;
export const MAX_KEYS_PER_TENANT = 1024;
/** Label-safe, log-safe: letters, digits, `_`, `.`, `-`, starting with a letter or digit, 1–64 characters. */
export const TENANT_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;
const SHA256_HEX = /^[0-9a-f]{64}$/;
const MODEL_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const TENANT_FIELDS = new Set([
  'keys',
  'rateLimitRps',
  'rateLimitBurst',
  'maxConnections',
  'models',
  'maxPriority',
]);

/** One tenant as the host enforces it. Limits are for the tenant as a whole, across every node of the host. */
export interface TenantSpec {
  name: string;
  /** SHA-256 of each key, lower-case hex. */
  keyHashes: readonly string[];
  /** Requests per second for the whole tenant; 0 = no tenant rate limit (per-client limits still apply). */
  rateLimitRps: number;
  /** Token bucket size for the whole tenant (default max(1, rateLimitRps)). */
  rateLimitBurst: number;
  /** Open WebSocket connections for the whole tenant; 0 = no tenant cap. */
  maxConnections: number;
  /** The models it may use; '*' = every model. */
  models: readonly string[] | '*';
  /** The highest priority its requests get: a request asking more is served at this one (clamped). */
  maxPriority: Priority;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * Validates a parsed API keys file; `source` names it in every error. Throws TenantFileError naming the file
 * and the bad entry (`tenants.acme.rateLimitRps: …`); a key digest given to two tenants names both.
 */
export function parseTenantFile(document: unknown, source: string): TenantSpec[] {
  const fail = (where: string, what: string): never => {
    throw new TenantFileError(`${source}: ${where}: ${what}`);
  };
  if (!isRecord(document)) fail('the file', 'expected a JSON object {"tenants": {…}}');
  const root = document as Record<string, unknown>;
  for (const key of Object.keys(root))
    if (key !== 'tenants') fail(key, 'unknown field (expected only "tenants")');
  const tenants = root.tenants;
  if (!isRecord(tenants)) fail('tenants', 'expected an object of tenant name → tenant');
  const names = Object.keys(tenants as Record<string, unknown>);
  if (names.length === 0) fail('tenants', 'no tenant: an empty file would refuse every client');
  if (names.length > MAX_TENANTS) fail('tenants', `${names.length} tenants; at most ${MAX_TENANTS}`);
  const owner = new Map<string, string>();
  const specs: TenantSpec[] = [];
  for (const name of names) {
    const at = `tenants.${name}`;
    if (!TENANT_NAME.test(name))
      fail(at, 'a tenant name is 1-64 letters, digits, "_", "." or "-", starting with a letter or digit');
    const entry = (tenants as Record<string, unknown>)[name];
    if (!isRecord(entry)) fail(at, 'expected an object');
    const tenant = entry as Record<string, unknown>;
    for (const field of Object.keys(tenant))
      if (!TENANT_FIELDS.has(field))
        fail(`${at}.${field}`, `unknown field (expected ${[...TENANT_FIELDS].join(', ')})`);
    const keys = tenant.keys;
    if (!Array.isArray(keys) || keys.length === 0)
      fail(`${at}.keys`, 'expected a non-empty array of SHA-256 hex digests');
    if ((keys as unknown[]).length > MAX_KEYS_PER_TENANT)
      fail(`${at}.keys`, `${(keys as unknown[]).length} keys; at most ${MAX_KEYS_PER_TENANT}`);
    const keyHashes: string[] = [];
    (keys as unknown[]).forEach((key, index) => {
      const where = `${at}.keys[${index}]`;
      const digest = typeof key === 'string' ? key.toLowerCase() : '';
      if (!SHA256_HEX.test(digest))
        fail(
          where,
          'expected the SHA-256 of a key as 64 hex digits (the key itself never goes in this file)',
        );
      const first = owner.get(digest);
      if (first !== undefined)
        fail(
          where,
          first === name ? 'this digest is listed twice' : `this digest also belongs to tenant "${first}"`,
        );
      owner.set(digest, name);
      keyHashes.push(digest);
    });
    const rateLimitRps = number(tenant.rateLimitRps, 0, 1_000_000);
    if (rateLimitRps === undefined)
      fail(
        `${at}.rateLimitRps`,
        'expected requests per second between 0 and 1000000 (0 = no tenant rate limit)',
      );
    let rateLimitBurst = Math.max(1, rateLimitRps as number);
    if (tenant.rateLimitBurst !== undefined) {
      const burst = number(tenant.rateLimitBurst, 1, 10_000_000);
      if (burst === undefined) fail(`${at}.rateLimitBurst`, 'expected a number between 1 and 10000000');
      rateLimitBurst = burst as number;
    }
    const maxConnections = number(tenant.maxConnections, 0, 10_000_000);
    if (maxConnections === undefined || !Number.isInteger(maxConnections))
      fail(`${at}.maxConnections`, 'expected an integer between 0 and 10000000 (0 = no tenant cap)');
    let models: readonly string[] | '*';
    if (tenant.models === '*') models = '*';
    else if (
      Array.isArray(tenant.models) &&
      tenant.models.length > 0 &&
      tenant.models.every((model) => typeof model === 'string' && MODEL_NAME.test(model))
    )
      models = [...new Set(tenant.models as string[])];
    else models = fail(`${at}.models`, 'expected "*" (every model) or a non-empty array of model names');
    let maxPriority: Priority = 'high';
    if (tenant.maxPriority !== undefined) {
      if (!(PRIORITIES as readonly unknown[]).includes(tenant.maxPriority))
        fail(`${at}.maxPriority`, `expected one of ${PRIORITIES.join(', ')}`);
      maxPriority = tenant.maxPriority as Priority;
    }
    specs.push({
      name,
      keyHashes,
      rateLimitRps: rateLimitRps as number,
      rateLimitBurst: rateLimitRps === 0 ? 0 : rateLimitBurst,
      maxConnections: maxConnections as number,
      models,
      maxPriority,
    });
  }
  return specs;
}

function number(value: unknown, min: number, max: number): number | undefined {
  return typeof value === 'number' && Number.isFinite(value) && value >= min && value <= max
    ? value
    : undefined;
}
