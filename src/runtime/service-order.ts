/**
 * Boot and shutdown order from what services declare (`dependsOn`), not from registration comments: a stable
 * topological sort (among services whose dependencies are met, the one registered first starts first). Stop order
 * is the reverse. A dependency on a service that is not registered, or a cycle, is a programming error and throws
 * before anything starts.
 */
export interface Ordered {
  name: string;
  dependsOn?: readonly string[];
}

export function orderServices<T extends Ordered>(services: readonly T[]): T[] {
  const byName = new Map(services.map((s) => [s.name, s]));
  for (const s of services) {
    for (const d of s.dependsOn ?? []) {
      if (!byName.has(d)) throw new Error(`service "${s.name}" depends on "${d}", which is not registered`);
    }
  }
  const done = new Set<string>();
  const out: T[] = [];
  while (out.length < services.length) {
    const next = services.find((s) => !done.has(s.name) && (s.dependsOn ?? []).every((d) => done.has(d)));
    if (!next) {
      const left = services.filter((s) => !done.has(s.name)).map((s) => `${s.name} → ${(s.dependsOn ?? []).filter((d) => !done.has(d)).join(', ')}`);
      throw new Error(`services depend on each other in a cycle: ${left.join('; ')}`);
    }
    done.add(next.name);
    out.push(next);
  }
  return out;
}
