import { spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import { createInterface } from 'node:readline';
import v8 from 'node:v8';
import vm from 'node:vm';
import { mintAccessToken } from '../../src/auth/tokens.js';
import { loadConfig } from '../../src/config.js';
import { openDatabase } from '../../src/db/database.js';
import { migrate } from '../../src/db/migrator.js';
import { seed } from '../../src/dev/demo-data.js';
import { createApp } from '../../src/http/app.js';
import { buildDependencies } from '../../src/dependencies.js';
import { spanCounts, startTracing } from '../../src/ops/tracing.js';
import { createHttpServer } from '../../src/http/server.js';
import { createLogger } from '../../src/logger.js';
import { heapGrowth, heapTotals } from './heap-diff.js';

/*
 * `npm run bench:live [-- --streams 10000] [-- --organizations 50]`: live updates. Opens that many
 * idle subscriptions (GraphQL over SSE, from a separate client process, spread over many
 * organizations, each with its own token) and prints the server's heap and resident memory per
 * open stream; then writes 100 sign-ins a second for 10 seconds, spread over the organizations,
 * and prints the pushes a second and the server's CPU. Figures, printed, not asserted.
 * `--heap-only`: stops after the heap figure (the memory-budget test reads it).
 * `--snapshot`: heap snapshots before and after the streams open, and what grew per stream, by
 * kind of object (`heap-diff.ts`).
 */
v8.setFlagsFromString('--expose-gc');
const collect = vm.runInNewContext('gc') as () => void;
const argument = (name: string, fallback: number) => {
  const at = process.argv.indexOf(`--${name}`);
  return at === -1 ? fallback : Number(process.argv[at + 1]);
};
// OTEL_EXPORTER_OTLP_ENDPOINT set: the streams traced (each holds its open spans), as the server would trace them.
await startTracing(loadConfig(process.env).tracing);
const streams = argument('streams', 10_000);
const organizationCount = argument('organizations', 50);
// The streams' first answers queue for the embedded database's one connection: on a loaded
// machine past a request's bounds (the 2 s wait for the connection, the 5 s statement), answered
// SERVICE_UNAVAILABLE, which this measures nothing of. Its heap is the figure; the bounds are long.
const database = await openDatabase({ memory: true, connectTimeoutMs: 120_000, statementTimeoutMs: 120_000 });
await migrate(database.sql);
const organizations = await seed(database, {
  organizations: organizationCount,
  childrenPerOrganization: 20,
  seed: 11,
  now: new Date(),
});
// Only organizations whose parent may sign in (the demo data has locked and inactive ones too).
const usable = new Set(
  (
    await database.sql.query<{ id: string }>(`SELECT id FROM "Account" WHERE type = 'parent' AND status = 'active'`)
  ).map((r) => r.id),
);
const parents = await Promise.all(
  organizations
    .filter((o) => usable.has(o.parent.userID))
    .map(async (o) => {
      const { jwtSecret } = await database.prisma.organization.findUniqueOrThrow({
        where: { parentId: o.parent.userID },
      });
      const children = await database.sql.query<{ id: string }>('SELECT id FROM "Account" WHERE "parentId" = $1', [
        o.parent.userID,
      ]);
      return { o, jwtSecret, children: children.map((c) => c.id) };
    }),
);
const perOrganization = Math.ceil(streams / parents.length);
const config = loadConfig({
  NODE_ENV: 'production',
  LOG_LEVEL: 'silent',
  MEMORY_BUDGET_MB: '8192',
  RATE_LIMIT_PER_ADDRESS: '0',
  RATE_LIMIT_PER_CREDENTIAL: '0',
  LIVE_MAX_PER_CREDENTIAL: String(perOrganization),
  LIVE_MAX_PER_ORGANIZATION: String(perOrganization),
  LIVE_MAX_STREAMS: String(streams),
});
const app = createApp(buildDependencies({ config, database, logger: createLogger('silent') }));
const server = createHttpServer(config.limits, (req, res) => app.handle(req, res));
server.maxConnections = streams + 100;
// A backlog for the burst of connections the clients open at once (the kernel caps it at somaxconn).
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', 4096, resolve));
const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

const memory = async () => {
  // Traced: spans that ended wait in the export queue until its next batch; that queue is bounded
  // and counted once, with the SDK, not per stream. Measured once the queue has handed every one on.
  for (
    const until = Date.now() + 30_000;
    spanCounts.ended > spanCounts.exported + spanCounts.failed && Date.now() < until;
  ) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  for (let i = 0; i < 3; i++) collect();
  const { heapUsed, rss } = process.memoryUsage();
  return { heapUsed, rss };
};
const snapshots = process.argv.includes('--snapshot');
/** Opens `count` streams for organization `i` from a client process; resolves with it once they answered. */
async function openStreams(i: number, count: number) {
  const { o, jwtSecret } = parents[i]!;
  const token = await mintAccessToken({
    secret: jwtSecret,
    kid: o.parent.publicKey,
    subject: o.parent.userID,
    ttlSeconds: 3600,
  });
  return spawn(process.execPath, ['test/bench/sse-clients.mjs', url, token, String(count)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
}
// A round of streams (up to 500) opened and closed first: the code the path compiles is not counted per stream.
const warm = await Promise.all(
  parents.slice(0, Math.ceil(500 / perOrganization)).map((_parent, i) => openStreams(i, perOrganization)),
);
await Promise.all(warm.map((client) => new Promise((resolve) => client.stdout!.once('data', resolve))));
for (const client of warm) client.kill();
while (app.deps.live!.open > 0) await new Promise((resolve) => setTimeout(resolve, 50));
const before = await memory();
const snapshotFile = (name: string) => path.join(tmpdir(), `live-${process.pid}-${name}.heapsnapshot`);
const snapshotBefore = snapshots ? v8.writeHeapSnapshot(snapshotFile('before')) : undefined;
const children = await Promise.all(parents.map((_parent, i) => openStreams(i, perOrganization)));
let events = 0;
const latest = new Map<number, number>();
await Promise.all(
  children.map(
    (child, i) =>
      new Promise<void>((resolve) => {
        createInterface({ input: child.stdout! }).on('line', (line) => {
          const parsed = JSON.parse(line) as { ready?: number; failed?: number; events?: number };
          if (parsed.ready !== undefined) {
            if (parsed.failed) console.log(`client ${i}: ${parsed.failed} subscriptions failed`);
            resolve();
          }
          if (parsed.events !== undefined) latest.set(i, parsed.events);
        });
      }),
  ),
);
const open = app.deps.live!.open;
const held = await memory();
console.log(
  `open streams: ${open.toLocaleString('en')} (${parents.length} organizations, ${perOrganization} streams each asked)`,
);
console.log(
  `heap: ${((held.heapUsed - before.heapUsed) / open).toFixed(0)} bytes a stream; resident: ${((held.rss - before.rss) / open).toFixed(0)} bytes a stream (${((held.rss - before.rss) / 1024 / 1024).toFixed(0)} MB in all)`,
);
if (process.argv.includes('--heap-only')) {
  for (const child of children) child.kill();
  process.exit(0);
}
if (snapshotBefore) {
  const snapshotHeld = v8.writeHeapSnapshot(snapshotFile('held'));
  for (const line of heapGrowth(heapTotals(snapshotBefore), heapTotals(snapshotHeld), open)) console.log(line);
  rmSync(snapshotBefore);
  rmSync(snapshotHeld);
}

// 100 sign-ins a second for 10 seconds, as the sign-in service writes them.
const SIGN_IN = `WITH child AS (UPDATE "Account" SET "signInCount" = "signInCount" + 1, "lastLogin" = now(), "updatedAt" = now() WHERE id = $1 RETURNING "parentId"),
  spent AS (UPDATE "Organization" SET "creditBalance" = "creditBalance" - 1 WHERE "parentId" = (SELECT "parentId" FROM child) RETURNING "parentId")
  INSERT INTO "MonthlyUsage" ("organizationId", month, "signIns") SELECT "parentId", date_trunc('month', now() AT TIME ZONE 'UTC'), 1 FROM spent
  ON CONFLICT ("organizationId", month) DO UPDATE SET "signIns" = "MonthlyUsage"."signIns" + 1`;
const pushesBefore = app.deps.live!.pushes;
const eventsBefore = [...latest.values()].reduce((a, b) => a + b, 0);
const cpuBefore = process.cpuUsage();
const started = performance.now();
for (let i = 0; i < 1000; i++) {
  const tick = performance.now();
  const { children: ids } = parents[i % parents.length]!;
  await database.sql.query(SIGN_IN, [ids[i % ids.length]]);
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, 10 - (performance.now() - tick))));
}
await new Promise((resolve) => setTimeout(resolve, 2_000));
const seconds = (performance.now() - started) / 1000;
const cpu = process.cpuUsage(cpuBefore);
events = [...latest.values()].reduce((a, b) => a + b, 0) - eventsBefore;
const pushes = app.deps.live!.pushes - pushesBefore;
console.log(
  `1,000 sign-ins over ${seconds.toFixed(1)} s: ${pushes.toLocaleString('en')} pushes (${(pushes / seconds).toFixed(0)} a second), ${events.toLocaleString('en')} events received; ` +
    `server process CPU ${(((cpu.user + cpu.system) / 1e6 / seconds) * 100).toFixed(0)} % of a core`,
);
for (const child of children) child.kill();
app.drain();
await new Promise<void>((resolve) => server.close(() => resolve()));
await app.close();
await database.close();
process.exit(0);
