import { readFileSync } from 'node:fs';

/*
 * The CPU of a server process split by layer, from a V8 CPU profile (node --cpu-prof): each
 * sample goes to the layer of the innermost frame on its stack that belongs to one, so that time
 * in a library or in V8's builtins counts for the code that called it.
 *
 * V8 samples by wall clock: a thread that the kernel deschedules inside a system call (a socket
 * write that wakes the client on a shared core) goes on being sampled there. So idle samples are
 * left out, and samples whose innermost frame is one of Node's native calls into the kernel are
 * reported on their own ("system calls"), outside the split: the shares are of the rest, the
 * samples spent running JavaScript, V8 and the garbage collector.
 */

type ProfileNode = { id: number; callFrame: { functionName: string; url: string }; children?: number[] };
type CpuProfile = { nodes: ProfileNode[]; samples: number[]; timeDeltas: number[]; startTime: number };

/** Layers in the order they are printed; the first rule that matches a frame's URL decides. */
const LAYERS: [string, RegExp][] = [
  [
    'edge (src/http, rest framing, limits, metrics, log)',
    /\/(?:src|dist)\/(http|rest|ops)\/|\/(?:src|dist)\/logger\.|\/(prom-client|pino|rate-limiter-flexible|proxy-addr|lru-cache)\//,
  ],
  [
    'GraphQL transports (lean, Yoga)',
    /\/(?:src|dist)\/graphql\/(lean|http|yoga|persisted)\.|\/(graphql-yoga|@whatwg-node|@graphql-yoga)\//,
  ],
  [
    'pipeline (envelop, parse, validate, armor)',
    /\/(?:src|dist)\/graphql\/(pipeline|observe)\.|\/@envelop\/(core|parser-cache|validation-cache)\/|\/@escape\.tech\/|\/graphql\/(language|validation)\//,
  ],
  [
    'execution (executor, resolvers, jit)',
    /\/(?:src|dist)\/graphql\/|\/graphql-jit\/|\/@envelop\/graphql-jit\/|\/@graphql-tools\/|\/graphql\/(execution|type|utilities|jsutils)\/|\/@pothos\//,
  ],
  [
    'auth and context (jose, loaders, cache, services)',
    /\/(?:src|dist)\/(auth|context|services|domain|db|live|errors)|\/(jose|dataloader)\//,
  ],
  ['database driver (pg, prisma)', /\/(pg|pg-protocol|pg-pool|@prisma)\//],
];
/** Node's own code counts for the layer that called it; only what nothing above claims is HTTP. */
const HTTP = 'HTTP (node:http, net, streams, timers)';
const SPECIAL: Record<string, string> = {
  '(garbage collector)': 'garbage collection',
  '(program)': 'V8 and native (no JS frame)',
  '(idle)': 'idle',
};
/** Node's native functions that enter the kernel (socket and file writes, reads, closes). */
export const SYSTEM_CALLS = 'system calls (wall time in the kernel, outside the split)';
const KERNEL_ENTRIES = new Set([
  'writev',
  'writeBuffer',
  'writeUtf8String',
  'writeLatin1String',
  'writeAsciiString',
  'writeUcs2String',
  'readStart',
  'readStop',
  'shutdown',
  'close',
  'read',
  'write',
  'fsync',
  'accept',
  'connect',
]);

/** A `--cpu-prof` file, read once for as many splits as are asked of it. */
export const readProfile = (file: string) => JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;

/**
 * The busy samples by layer: `share` of the samples outside system calls and idle; the system
 * calls' row has its share of all busy samples instead (in `share`), and comes last. With
 * `windows` (µs of the monotonic clock, which is the profile's own: `process.hrtime`), only the
 * samples taken inside one of them count.
 */
export function layerSplit(
  profile: CpuProfile,
  windows?: readonly [number, number][],
): { layer: string; ms: number; share: number }[] {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const parent = new Map<number, number>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id);
  const layerOf = new Map<number, string>();
  /** The layer of the nearest frame at or above this one that belongs to one. */
  const claimed = (id: number): string => {
    const known = layerOf.get(id);
    if (known) return known;
    const { functionName, url } = byId.get(id)!.callFrame;
    let layer = Object.hasOwn(SPECIAL, functionName)
      ? SPECIAL[functionName]
      : url === '' && KERNEL_ENTRIES.has(functionName)
        ? SYSTEM_CALLS
        : LAYERS.find(([, rule]) => rule.test(url))?.[0];
    if (!layer) {
      const up = parent.get(id);
      layer = up === undefined ? (url.startsWith('node:') ? HTTP : 'other') : claimed(up);
      if (layer === 'other' && url.startsWith('node:')) layer = HTTP;
    }
    layerOf.set(id, layer);
    return layer;
  };
  const classify = claimed;
  const totals = new Map<string, number>();
  let at = profile.startTime;
  profile.samples.forEach((id, i) => {
    at += profile.timeDeltas[i] ?? 0;
    if (windows && !windows.some(([from, to]) => at >= from && at <= to)) return;
    const layer = classify(id);
    totals.set(layer, (totals.get(layer) ?? 0) + (profile.timeDeltas[i] ?? 0));
  });
  totals.delete('idle');
  const kernel = totals.get(SYSTEM_CALLS) ?? 0;
  totals.delete(SYSTEM_CALLS);
  const running = [...totals.values()].reduce((a, b) => a + b, 0);
  return [
    ...[...totals.entries()]
      .map(([layer, us]) => ({ layer, ms: Math.round(us / 1000), share: us / running }))
      .sort((a, b) => b.ms - a.ms),
    { layer: SYSTEM_CALLS, ms: Math.round(kernel / 1000), share: kernel / (running + kernel) },
  ];
}

/** `tsx test/bench/layers.ts <file.cpuprofile>`: prints the split. */
if (process.argv[1]?.endsWith('layers.ts') && process.argv[2]) {
  for (const { layer, ms, share } of layerSplit(readProfile(process.argv[2])))
    console.log(`${layer.padEnd(52)} ${String(ms).padStart(7)} ms  ${(share * 100).toFixed(1).padStart(5)} %`);
}
