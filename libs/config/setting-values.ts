/** What a setting's value may look like: the text patterns and the parsers beyond coerce.ts's generic ones. */
import { formatCidrList, parseCidrList } from '../address';
import { integer, type Parser } from './coerce';
import { formatDeviceList, parseDeviceList } from './device';

export const SAFE_TEXT = /^[^\s\0]+$/;
export const PATH_TEXT = /^[^\0]+$/;
export const MODEL_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;
export const NATS_URLS = /^(nats|tls):\/\/[^\s,]+(,(nats|tls):\/\/[^\s,]+)*$/;
export const NATS_USER = /^[^\s\0]{1,256}$/;
// Fleet names go into bucket names and subjects; host ids into KV keys and subjects.
export const FLEET_NAME = /^[A-Za-z0-9_-]{1,32}$/;
export const HOST_ID = /^[A-Za-z0-9_-]{1,64}$/;
export const HTTP_URL = /^https?:\/\/[^\s]+$/;
/** A web origin as browsers send it: scheme://host[:port], nothing after. */
export const ORIGIN = /^https?:\/\/[a-z0-9.-]+(?::\d{1,5})?$|^https?:\/\/\[[0-9a-f:.]+\](?::\d{1,5})?$/;

/** Origins, comma-separated (a file may give an array): written back lower case, one comma between. */
export const originsParser: Parser<string | undefined> = (raw) => {
  const items = Array.isArray(raw) ? raw : typeof raw === 'string' ? raw.split(',') : undefined;
  if (!items || items.length === 0 || items.length > 64) return undefined;
  const origins: string[] = [];
  for (const item of items) {
    if (typeof item !== 'string') return undefined;
    const origin = item.trim().toLowerCase();
    if (!ORIGIN.test(origin)) return undefined;
    origins.push(origin);
  }
  return { value: origins.join(',') };
};

export const deviceParser: Parser<string> = (raw) => {
  if (typeof raw !== 'string') return undefined;
  const targets = parseDeviceList(raw);
  return targets === undefined ? undefined : { value: formatDeviceList(targets) };
};

/** A comma list of IPv4/IPv6 prefixes or addresses, kept in canonical form (`10.0.0.0/8,::1/128`). */
export const proxiesParser: Parser<string> = (raw) => {
  if (typeof raw !== 'string' || raw.length > 16_384) return undefined;
  const parsed = parseCidrList(raw);
  return parsed.ok ? { value: formatCidrList(parsed.cidrs) } : undefined;
};

export const intraOpParser: Parser<number | undefined> = (raw) => {
  if (typeof raw === 'string' && raw.toLowerCase() === 'auto') return { value: undefined };
  const parsed = integer(0, 1024)(raw);
  if (parsed === undefined) return undefined;
  return { value: parsed.value === 0 ? undefined : parsed.value };
};
