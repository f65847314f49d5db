export type { Cidr, CidrListResult, IpBytes } from './ip';
export {
  canonicalAddress,
  cidrContains,
  clientKey,
  formatCidr,
  formatCidrList,
  formatIp,
  isLoopbackName,
  parseCidr,
  parseCidrList,
  parseIp,
} from './ip';
export { ProxyTrust } from './proxy-trust';
