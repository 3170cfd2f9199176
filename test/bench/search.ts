import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { mintAccessToken } from '../../src/auth/tokens.js';
import { openDatabase } from '../../src/db/database.js';
import { migrate } from '../../src/db/migrator.js';
import { seed } from '../../src/dev/demo-data.js';
import { freePort, postgresBinDir, startCluster, type Cluster } from '../helpers/postgres-cluster.js';

/*
 * `npm run bench:search [-- --children 1000000] [-- --rounds 3] [-- --database-url postgres://…]`:
 * the child list's search at a large organization. Seeds one organization with that many children
 * on a throwaway PostgreSQL cluster (or uses the largest organization at `--database-url`), then,
 * in each round, starts the built server as production runs it and asks the first page
 * (`limit=20`, exact stats) of a fixed set of terms, each alone and within last month's
 * registrations: cold (the server's first request of the term) and warm (the next). Prints each
 * term's times over the rounds. Figures, printed, not asserted.
 */
const argument = (name: string) => {
  const at = process.argv.indexOf(`--${name}`);
  return at === -1 ? undefined : process.argv[at + 1];
};
const childCount = Number(argument('children') ?? 1_000_000);
const rounds = Number(argument('rounds') ?? 3);
const root = fileURLToPath(new URL('../..', import.meta.url));

let cluster: Cluster | undefined;
let url = argument('database-url');
if (!url) {
  const bin = postgresBinDir();
  if (!bin) throw new Error('the PostgreSQL server binaries are needed (pg_config --bindir), or --database-url');
  cluster = await startCluster(bin);
  url = cluster.url;
}
const database = await openDatabase({ url, statementTimeoutMs: 600_000 });
let server: ChildProcess | undefined;
try {
  await migrate(database.sql);
  let [largest] = await database.sql.query<{ parentId: string; n: number }>(
    `SELECT "parentId", count(*)::int AS n FROM "Account" WHERE "parentId" IS NOT NULL GROUP BY 1 ORDER BY 2 DESC LIMIT 1`,
  );
  if (!largest || largest.n < childCount) {
    const started = performance.now();
    const [organization] = await seed(database, { organizations: 1, childrenPerOrganization: childCount, seed: 7, now: new Date() });
    await database.sql.exec('VACUUM ANALYZE');
    console.log(`seeded ${childCount} children in ${((performance.now() - started) / 1000).toFixed(0)} s`);
    largest = { parentId: organization!.parent.userID, n: childCount };
  }
  const { parentId } = largest;
  const { jwtSecret, parent } = await database.prisma.organization.findUniqueOrThrow({ where: { parentId }, include: { parent: true } });
  const token = await mintAccessToken({ secret: jwtSecret, kid: parent.publicKey, subject: parentId, ttlSeconds: 3600 * 6 });
  const [domain] = await database.sql.query<{ domain: string }>(`SELECT split_part(email, '@', 2) AS domain FROM "Account" WHERE "parentId" = $1 LIMIT 1`, [parentId]);
  console.log(`organization ${parentId}: ${largest.n} children`);

  const terms: [string, string][] = [
    ['one letter, common', 'a'],
    ['one letter, rare', 'q'],
    ['two letters, rare', 'zq'],
    ['two letters, common', 'th'],
    ['three+, rare', 'zqu'],
    ['three+, common', 'son'],
    ['e-mail domain', `@${domain!.domain}`],
    ['none', 'xylophone'],
  ];
  const now = new Date();
  const month = [new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() - 1, 1)), new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 0))].map((d) => d.toISOString().slice(0, 10));
  const asked = terms.flatMap(([kind, term]) => [
    { kind, query: `search=${encodeURIComponent(term)}` },
    { kind: `${kind}, last month`, query: `search=${encodeURIComponent(term)}&startDate=${month[0]}&endDate=${month[1]}` },
  ]);
  const times = new Map<string, { cold: number[]; warm: number[]; total: number }>();
  for (let round = 0; round < rounds; round++) {
    const port = await freePort();
    server = spawn(process.execPath, ['--max-semi-space-size=8', path.join(root, 'dist', 'main.js')], {
      env: { ...process.env, DATABASE_URL: url, NODE_ENV: 'production', PORT: String(port), LOG_LEVEL: 'warn', MIGRATE_ON_START: 'false', RATE_LIMIT_PER_CREDENTIAL: '0', RATE_LIMIT_PER_ADDRESS: '0' },
      stdio: ['ignore', 'ignore', 'inherit'],
    });
    const base = `http://127.0.0.1:${port}`;
    for (let tries = 0; ; tries++) {
      const ready = await fetch(`${base}/readyz`).then((r) => r.ok, () => false);
      if (ready) break;
      if (tries > 300) throw new Error('the server did not become ready');
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    // The server's own first request (its connections, its code warming up) is not a term's.
    await fetch(`${base}/auth/child-accounts?limit=20`, { headers: { authorization: `Bearer ${token}` } }).then((r) => r.arrayBuffer());
    await fetch(`${base}/auth/child-accounts?limit=20&search=zzzzzz`, { headers: { authorization: `Bearer ${token}` } }).then((r) => r.arrayBuffer());
    for (const { kind, query } of asked) {
      const entry = times.get(kind) ?? { cold: [], warm: [], total: 0 };
      for (const pass of ['cold', 'warm'] as const) {
        const started = performance.now();
        const response = await fetch(`${base}/auth/child-accounts?limit=20&${query}`, { headers: { authorization: `Bearer ${token}` } });
        const body = (await response.json()) as { data?: { data: { stats: { total: number } } }; error?: { code: string } };
        entry[pass].push(performance.now() - started);
        if (response.status !== 200) console.log(`round ${round + 1} ${kind} (${pass}): ${response.status} ${body.error?.code}`);
        else entry.total = body.data!.data.stats.total;
      }
      times.set(kind, entry);
    }
    server.kill('SIGTERM');
    await new Promise((resolve) => server!.once('exit', resolve));
    server = undefined;
  }
  const sorted = (values: number[]) => [...values].sort((a, b) => a - b);
  const at = (values: number[], p: number) => sorted(values)[Math.min(values.length - 1, Math.floor(values.length * p))]!;
  console.log(`\n${rounds} rounds, each on a new server; first page, limit 20, exact stats (ms)`);
  console.log('| term | matches | cold p50 | cold p99 | warm p50 | warm p99 |');
  console.log('|---|---|---|---|---|---|');
  for (const [kind, { cold, warm, total }] of times) {
    console.log(`| ${kind} | ${total} | ${at(cold, 0.5).toFixed(0)} | ${at(cold, 0.99).toFixed(0)} | ${at(warm, 0.5).toFixed(1)} | ${at(warm, 0.99).toFixed(1)} |`);
  }
} finally {
  server?.kill('SIGKILL');
  await database.close();
  cluster?.stop();
}
