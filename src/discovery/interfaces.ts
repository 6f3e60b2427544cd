import { networkInterfaces } from 'node:os';

const WILDCARDS = new Set(['::', '0.0.0.0', '*', '']);

/** The IPv4 addresses the configured `hostnames` name; undefined = every interface. Throws when a name matches nothing. */
export function resolveInterfaces(hostnames: string): string[] | undefined {
  const items = hostnames
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
  if (items.length === 0 || items.some((s) => WILDCARDS.has(s))) return undefined;
  const ifaces = networkInterfaces();
  const out: string[] = [];
  for (const item of items) {
    if (/^\d+\.\d+\.\d+\.\d+$/.test(item)) {
      const known = Object.values(ifaces).some((list) => list?.some((a) => a.address === item));
      if (!known) throw new Error(`no interface has the address ${item} (DiscoveryManager.hostnames)`);
      out.push(item);
      continue;
    }
    const addr = ifaces[item]?.find((a) => a.family === 'IPv4');
    if (!addr) throw new Error(`no interface named "${item}" with an IPv4 address (DiscoveryManager.hostnames); mDNS here is IPv4`);
    out.push(addr.address);
  }
  return [...new Set(out)];
}
