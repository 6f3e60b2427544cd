import { BlockList, isIP } from 'node:net';

/**
 * Lists of IP addresses and CIDR ranges (`127.0.0.1`, `10.0.0.0/8`, `::1`, `fd00::/8`), the one reading of them for
 * every setting that takes one: RestApi.trustedProxies, endPointConfig.allowedProxyHosts and
 * AuthManager.lockoutExemptAddresses (validated by the config schema with `isAddressOrCidr`).
 */

/** An IPv4 / IPv6 address or CIDR range with a prefix the family allows. */
export function isAddressOrCidr(v: string): boolean {
  const [addr = '', bits, extra] = v.trim().split('/');
  const family = isIP(addr);
  if (family === 0 || extra !== undefined) return false;
  if (bits === undefined) return true;
  const n = Number(bits);
  return /^\d{1,3}$/.test(bits) && n <= (family === 4 ? 32 : 128);
}

/** A BlockList of the entries; an entry that is no address or range throws (`what` names the setting). */
export function addressList(entries: readonly string[], what = 'address list'): BlockList {
  const list = new BlockList();
  for (const raw of entries) {
    if (!isAddressOrCidr(raw)) throw new Error(`${what}: '${raw}' is not an IP address or CIDR range`);
    const [addr = '', bits] = raw.trim().split('/');
    const type = isIP(addr) === 4 ? 'ipv4' : 'ipv6';
    if (bits === undefined) list.addAddress(addr, type);
    else list.addSubnet(addr, Number(bits), type);
  }
  return list;
}

/** Is `address` in `list`? IPv4-mapped IPv6 (`::ffff:10.0.0.1`) is checked as IPv4; anything that is no address is not. */
export function inList(list: BlockList, address: string | undefined): boolean {
  if (!address) return false;
  const a = address.trim();
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(a);
  if (mapped) return list.check(mapped[1]!, 'ipv4');
  const family = isIP(a);
  if (family === 0) return false;
  return list.check(a, family === 4 ? 'ipv4' : 'ipv6');
}
