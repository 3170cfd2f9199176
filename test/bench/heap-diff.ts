import { readFileSync } from 'node:fs';

/*
 * What a heap holds, by kind of object: V8 heap snapshots (v8.writeHeapSnapshot) summed by the
 * node's type and constructor or function name (strings, numbers and code by type alone), and
 * the difference between two of them. Used by `npm run bench:live -- --snapshot` to say where
 * the heap that each open stream costs goes.
 */

type Totals = Map<string, { count: number; bytes: number }>;

export function heapTotals(file: string): Totals {
  const snapshot = JSON.parse(readFileSync(file, 'utf8')) as {
    snapshot: { meta: { node_fields: string[]; node_types: [string[], ...unknown[]] } };
    nodes: number[];
    strings: string[];
  };
  const fields = snapshot.snapshot.meta.node_fields;
  const width = fields.length;
  const [typeAt, nameAt, sizeAt] = ['type', 'name', 'self_size'].map((field) => fields.indexOf(field)) as [
    number,
    number,
    number,
  ];
  const types = snapshot.snapshot.meta.node_types[0];
  const totals: Totals = new Map();
  for (let i = 0; i < snapshot.nodes.length; i += width) {
    const type = types[snapshot.nodes[i + typeAt]!]!;
    const named = type === 'object' || type === 'closure' || type === 'native';
    const key = named ? `${type} ${snapshot.strings[snapshot.nodes[i + nameAt]!]}` : type;
    const entry = totals.get(key) ?? { count: 0, bytes: 0 };
    entry.count += 1;
    entry.bytes += snapshot.nodes[i + sizeAt]!;
    totals.set(key, entry);
  }
  return totals;
}

/** The kinds that grew most from `before` to `after`, per `unit` (for example per open stream). */
export function heapGrowth(before: Totals, after: Totals, unit: number, top = 25): string[] {
  const rows = [...after].map(([key, { count, bytes }]) => {
    const was = before.get(key) ?? { count: 0, bytes: 0 };
    return { key, count: (count - was.count) / unit, bytes: (bytes - was.bytes) / unit };
  });
  rows.sort((a, b) => b.bytes - a.bytes);
  const total = rows.reduce((sum, row) => sum + row.bytes, 0);
  return [
    `self size that grew, per unit: ${total.toFixed(0)} bytes in all`,
    ...rows
      .slice(0, top)
      .map(
        (row) =>
          `${row.bytes.toFixed(0).padStart(7)} B  ${row.count.toFixed(2).padStart(6)} objects  ${row.key.slice(0, 100)}`,
      ),
  ];
}
