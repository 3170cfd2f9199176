import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
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
 *
 * Then, with `--searchers N` (8; 0: none), the tenants beside them: N more organizations of
 * `--searcher-children` (100,000) children each, whose parents each search fresh two- and
 * three-letter terms one after another (waiting out a refusal's Retry-After, as a client would), while
 * `--connections` (50) ask for random children's profiles (`test/bench/load.mjs`) for `--seconds`
 * (10). In each round the profile rows run alone and with the searchers, in alternating order:
 * their requests a second with the searchers over without, and the searches' answers and times.
 *
 * `--fair` instead: three organizations sharing the search (see `fair` below).
 */
const argument = (name: string) => {
  const at = process.argv.indexOf(`--${name}`);
  return at === -1 ? undefined : process.argv[at + 1];
};
const childCount = Number(argument('children') ?? 1_000_000);
const rounds = Number(argument('rounds') ?? 3);
const searchers = Number(argument('searchers') ?? 8);
const searcherChildren = Number(argument('searcher-children') ?? 100_000);
const connections = Number(argument('connections') ?? 50);
const seconds = Number(argument('seconds') ?? 10);
const root = fileURLToPath(new URL('../..', import.meta.url));

const letters = 'abcdefghijklmnopqrstuvwxyz0123456789';
const asked = new Set<string>();
/** A two- or three-letter term not asked before in this run (so no cached count answers it). */
function freshTerm(): string {
  for (;;) {
    const term = Array.from(
      { length: 2 + Math.floor(Math.random() * 2) },
      () => letters[Math.floor(Math.random() * letters.length)],
    ).join('');
    if (!asked.has(term)) return (asked.add(term), term);
  }
}

/**
 * `--connections` asking for profiles with the tokens in `tokensFile` for `--seconds` (`load.mjs`): requests
 * a second.
 */
function profileLoad(base: string, tokensFile: string): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    const load = spawn(
      process.execPath,
      [
        path.join(root, 'test', 'bench', 'load.mjs'),
        JSON.stringify({ url: `${base}/auth/user-profile`, connections, duration: seconds, tokensFile }),
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let out = '';
    load.stdout.on('data', (chunk: Buffer) => (out += chunk));
    load.once('exit', (code) =>
      code === 0
        ? resolve((JSON.parse(out) as { requests: { average: number } }).requests.average)
        : reject(new Error(`load.mjs exited ${code}`)),
    );
  });
}

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
  /** The built server as production starts it, on a free port; resolves to its base URL once ready. */
  async function startServer(): Promise<string> {
    const port = await freePort();
    server = spawn(process.execPath, ['--max-semi-space-size=8', path.join(root, 'dist', 'main.js')], {
      env: {
        ...process.env,
        DATABASE_URL: url,
        NODE_ENV: 'production',
        PORT: String(port),
        LOG_LEVEL: 'warn',
        MIGRATE_ON_START: 'false',
        RATE_LIMIT_PER_CREDENTIAL: '0',
        RATE_LIMIT_PER_ADDRESS: '0',
      },
      stdio: ['ignore', 'ignore', 'inherit'],
    });
    const base = `http://127.0.0.1:${port}`;
    for (let tries = 0; ; tries++) {
      const ready = await fetch(`${base}/readyz`).then(
        (r) => r.ok,
        () => false,
      );
      if (ready) return base;
      if (tries > 300) throw new Error('the server did not become ready');
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
  async function stopServer(): Promise<void> {
    server?.kill('SIGTERM');
    if (server) await new Promise((resolve) => server!.once('exit', resolve));
    server = undefined;
  }

  if (process.argv.includes('--fair')) await fair();
  else await termsAndCrowd();

  async function termsAndCrowd(): Promise<void> {
    let [largest] = await database.sql.query<{ parentId: string; n: number }>(
      `SELECT "parentId", count(*)::int AS n FROM "Account" WHERE "parentId" IS NOT NULL GROUP BY 1 ORDER BY 2 DESC LIMIT 1`,
    );
    if (!largest || largest.n < childCount) {
      const started = performance.now();
      const [organization] = await seed(database, {
        organizations: 1,
        childrenPerOrganization: childCount,
        seed: 7,
        now: new Date(),
      });
      await database.sql.exec('VACUUM ANALYZE');
      console.log(`seeded ${childCount} children in ${((performance.now() - started) / 1000).toFixed(0)} s`);
      largest = { parentId: organization!.parent.userID, n: childCount };
    }
    const { parentId } = largest;
    const { jwtSecret, parent } = await database.prisma.organization.findUniqueOrThrow({
      where: { parentId },
      include: { parent: true },
    });
    const token = await mintAccessToken({
      secret: jwtSecret,
      kid: parent.publicKey,
      subject: parentId,
      ttlSeconds: 3600 * 6,
    });
    const [domain] = await database.sql.query<{ domain: string }>(
      `SELECT split_part(email, '@', 2) AS domain FROM "Account" WHERE "parentId" = $1 LIMIT 1`,
      [parentId],
    );
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
    const month = [
      new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() - 1, 1)),
      new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 0)),
    ].map((d) => d.toISOString().slice(0, 10));
    const asked = terms.flatMap(([kind, term]) => [
      { kind, query: `search=${encodeURIComponent(term)}` },
      {
        kind: `${kind}, last month`,
        query: `search=${encodeURIComponent(term)}&startDate=${month[0]}&endDate=${month[1]}`,
      },
    ]);
    const times = new Map<string, { cold: number[]; warm: number[]; total: number }>();
    /** Requests refused for the searches' time share, each waited out and asked again. */
    let waited = 0;
    for (let round = 0; round < rounds; round++) {
      const base = await startServer();
      // The server's own first request (its connections, its code warming up) is not a term's.
      await fetch(`${base}/auth/child-accounts?limit=20`, { headers: { authorization: `Bearer ${token}` } }).then((r) =>
        r.arrayBuffer(),
      );
      await fetch(`${base}/auth/child-accounts?limit=20&search=zzzzzz`, {
        headers: { authorization: `Bearer ${token}` },
      }).then((r) => r.arrayBuffer());
      for (const { kind, query } of asked) {
        const entry = times.get(kind) ?? { cold: [], warm: [], total: 0 };
        for (const pass of ['cold', 'warm'] as const) {
          for (;;) {
            const started = performance.now();
            const response = await fetch(`${base}/auth/child-accounts?limit=20&${query}`, {
              headers: { authorization: `Bearer ${token}` },
            });
            const body = (await response.json()) as {
              data?: { data: { stats: { total: number } } };
              error?: { code: string };
            };
            const retryAfter = Number(response.headers.get('retry-after'));
            // Searches past their share of the time (SEARCH_MAX_TIME_PERCENT) are refused before
            // they read anything: as a client would, wait as told and ask again.
            if ((response.status === 429 || response.status === 503) && retryAfter > 0) {
              waited += 1;
              await new Promise((resolve) => setTimeout(resolve, retryAfter * 1000));
              continue;
            }
            entry[pass].push(performance.now() - started);
            if (response.status !== 200)
              console.log(`round ${round + 1} ${kind} (${pass}): ${response.status} ${body.error?.code}`);
            else entry.total = body.data!.data.stats.total;
            break;
          }
        }
        times.set(kind, entry);
      }
      await stopServer();
    }
    const sorted = (values: number[]) => [...values].sort((a, b) => a - b);
    const at = (values: number[], p: number) =>
      sorted(values)[Math.min(values.length - 1, Math.floor(values.length * p))]!;
    console.log(
      `\n${rounds} rounds, each on a new server; first page, limit 20, exact stats (ms); ${waited} refusals for the time share waited out`,
    );
    console.log('| term | matches | cold p50 | cold p99 | warm p50 | warm p99 |');
    console.log('|---|---|---|---|---|---|');
    for (const [kind, { cold, warm, total }] of times) {
      console.log(
        `| ${kind} | ${total} | ${at(cold, 0.5).toFixed(0)} | ${at(cold, 0.99).toFixed(0)} | ${at(warm, 0.5).toFixed(1)} | ${at(warm, 0.99).toFixed(1)} |`,
      );
    }
    if (searchers > 0) await crowd(parentId, at);
  }

  /** `--searchers`: the profile rows' throughput with N parents searching beside them, and without. */
  async function crowd(largestParent: string, at: (values: number[], p: number) => number): Promise<void> {
    const others = await database.sql.query<{ parentId: string }>(
      `SELECT "parentId" FROM "Account" WHERE "parentId" IS NOT NULL AND "parentId" <> $1 GROUP BY 1 HAVING count(*) >= $2 ORDER BY 1 LIMIT $3`,
      [largestParent, searcherChildren, searchers],
    );
    if (others.length < searchers) {
      const started = performance.now();
      const seeded = await seed(database, {
        organizations: searchers - others.length,
        childrenPerOrganization: searcherChildren,
        seed: 11 + others.length,
        now: new Date(),
      });
      await database.sql.exec('VACUUM ANALYZE');
      console.log(
        `\nseeded ${seeded.length} organizations of ${searcherChildren} children in ${((performance.now() - started) / 1000).toFixed(0)} s`,
      );
      others.push(...seeded.map((organization) => ({ parentId: organization.parent.userID })));
    }
    const signers = new Map<string, { secret: string; kid: string }>();
    for (const { parentId: id } of [{ parentId: largestParent }, ...others]) {
      const { jwtSecret, parent } = await database.prisma.organization.findUniqueOrThrow({
        where: { parentId: id },
        include: { parent: true },
      });
      await database.sql.query('UPDATE "Organization" SET "creditBalance" = 1000000000 WHERE "parentId" = $1', [id]);
      signers.set(id, { secret: jwtSecret, kid: parent.publicKey });
    }
    const mint = (parent: string, subject: string) =>
      mintAccessToken({ ...signers.get(parent)!, subject, ttlSeconds: 3600 * 6 });
    const parentTokens = await Promise.all(others.map(({ parentId: id }) => mint(id, id)));
    // The profile callers: 100,000 active children drawn at random from every organization.
    const callers = await database.sql.query<{ id: string; parentId: string }>(
      `SELECT id, "parentId" FROM "Account" WHERE "parentId" IS NOT NULL AND status = 'active' ORDER BY random() LIMIT 100000`,
    );
    const tokensFile = path.join(mkdtempSync(path.join(tmpdir(), 'bench-search-')), 'tokens.txt');
    writeFileSync(
      tokensFile,
      (await Promise.all(callers.map((caller) => mint(caller.parentId, caller.id)))).join('\n'),
    );

    const profiles = (base: string) => profileLoad(base, tokensFile);
    const rows: { alone: number; beside: number; statuses: Map<number, number>; times: number[] }[] = [];
    for (let round = 0; round < rounds; round++) {
      const base = await startServer();
      // Every caller once first (the cold pass), so both runs see the same cache.
      await profiles(base);
      const statuses = new Map<number, number>();
      const times: number[] = [];
      const withSearches = async () => {
        let running = true;
        const loops = parentTokens.map(async (token) => {
          while (running) {
            const started = performance.now();
            const response = await fetch(`${base}/auth/child-accounts?limit=20&search=${freshTerm()}`, {
              headers: { authorization: `Bearer ${token}` },
            });
            await response.arrayBuffer();
            times.push(performance.now() - started);
            statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1);
            const retry = Number(response.headers.get('retry-after') ?? 0);
            if ((response.status === 429 || response.status === 503) && retry > 0)
              await new Promise((resolve) => setTimeout(resolve, retry * 1000));
          }
        });
        const rate = await profiles(base);
        running = false;
        await Promise.all(loops);
        return rate;
      };
      let alone: number;
      let beside: number;
      if (round % 2 === 0) {
        alone = await profiles(base);
        beside = await withSearches();
      } else {
        beside = await withSearches();
        alone = await profiles(base);
      }
      rows.push({ alone, beside, statuses, times });
      await stopServer();
    }
    console.log(
      `\n${searchers} parents (${searcherChildren} children each) searching fresh 2-3 letter terms while ${connections} connections ask random children's profiles, ${seconds} s`,
    );
    console.log(
      '| round | profiles alone (req/s) | with the searches | ratio | searches (status: count) | search p50 / p99 ms |',
    );
    console.log('|---|---|---|---|---|---|');
    rows.forEach(({ alone, beside, statuses, times }, i) => {
      const answered = [...statuses].map(([status, count]) => `${status}: ${count}`).join(', ');
      console.log(
        `| ${i + 1} | ${alone.toFixed(0)} | ${beside.toFixed(0)} | ${(beside / alone).toFixed(2)} | ${answered} | ${at(times, 0.5).toFixed(0)} / ${at(times, 0.99).toFixed(0)} |`,
      );
    });
  }

  /**
   * `--fair`: three organizations of `--fair-children` (30,000) children. A second parent searches
   * `--terms` (40) fresh terms one after another, each waiting for its answer, while a third's
   * children ask for their profiles (`--connections`, `--seconds`): without, then beside, a first
   * parent hammering the search from 16 connections with fresh terms. At the server's defaults.
   */
  async function fair(): Promise<void> {
    const fairChildren = Number(argument('fair-children') ?? 30_000);
    const termCount = Number(argument('terms') ?? 40);
    const orgs = await database.sql.query<{ parentId: string }>(
      `SELECT "parentId" FROM "Account" WHERE "parentId" IS NOT NULL GROUP BY 1 HAVING count(*) >= $1 ORDER BY 1 LIMIT 3`,
      [fairChildren],
    );
    if (orgs.length < 3) {
      const seeded = await seed(database, {
        organizations: 3 - orgs.length,
        childrenPerOrganization: fairChildren,
        seed: 23 + orgs.length,
        now: new Date(),
      });
      await database.sql.exec('VACUUM ANALYZE');
      orgs.push(...seeded.map((organization) => ({ parentId: organization.parent.userID })));
    }
    const signer = async (id: string) => {
      const { jwtSecret, parent } = await database.prisma.organization.findUniqueOrThrow({
        where: { parentId: id },
        include: { parent: true },
      });
      await database.sql.query('UPDATE "Organization" SET "creditBalance" = 1000000000 WHERE "parentId" = $1', [id]);
      return (subject: string) =>
        mintAccessToken({ secret: jwtSecret, kid: parent.publicKey, subject, ttlSeconds: 3600 * 6 });
    };
    const [hammerId, searcherId, bystanderId] = orgs.map((org) => org.parentId) as [string, string, string];
    const hammerToken = await (await signer(hammerId))(hammerId);
    const searcherToken = await (await signer(searcherId))(searcherId);
    const mintBystander = await signer(bystanderId);
    const callers = await database.sql.query<{ id: string }>(
      `SELECT id FROM "Account" WHERE "parentId" = $1 AND status = 'active' LIMIT 20000`,
      [bystanderId],
    );
    const tokensFile = path.join(mkdtempSync(path.join(tmpdir(), 'bench-fair-')), 'tokens.txt');
    writeFileSync(tokensFile, (await Promise.all(callers.map((caller) => mintBystander(caller.id)))).join('\n'));

    const search = async (base: string, token: string, term: string) => {
      const started = performance.now();
      const response = await fetch(`${base}/auth/child-accounts?limit=20&search=${encodeURIComponent(term)}`, {
        headers: { authorization: `Bearer ${token}` },
      });
      await response.arrayBuffer();
      return { status: response.status, ms: performance.now() - started };
    };
    const oneAtATime = async (base: string) => {
      const answers = [];
      for (let i = 0; i < termCount; i++) answers.push(await search(base, searcherToken, freshTerm()));
      return answers;
    };
    /** The searcher's terms, a second into the profiles' load (so that both run together), and the profiles' rate. */
    const together = async (base: string) => {
      const load = profileLoad(base, tokensFile);
      await new Promise((resolve) => setTimeout(resolve, 1000));
      const searches = await oneAtATime(base);
      return { searches, profiles: await load };
    };
    const rows = [];
    for (let round = 0; round < rounds; round++) {
      const base = await startServer();
      await profileLoad(base, tokensFile);
      // Without the hammering parent, then beside it.
      const alone = await together(base);
      const hammer = new Map<number, number>();
      let hammering = true;
      const loops = Array.from({ length: 16 }, async () => {
        while (hammering) {
          const { status } = await search(base, hammerToken, freshTerm());
          hammer.set(status, (hammer.get(status) ?? 0) + 1);
        }
      });
      const beside = await together(base);
      hammering = false;
      await Promise.all(loops);
      rows.push({
        aloneSearches: alone.searches,
        besideSearches: beside.searches,
        aloneProfiles: alone.profiles,
        besideProfiles: beside.profiles,
        hammer,
      });
      await stopServer();
    }
    const sorted = (values: number[]) => [...values].sort((a, b) => a - b);
    const median = (values: number[]) => sorted(values)[Math.floor(values.length / 2)]!;
    console.log(
      `\n3 organizations of ${fairChildren} children: one parent hammering the search from 16 connections, one searching ${termCount} fresh terms one at a time, one's children asking their profiles (${connections} connections, ${seconds} s); server defaults`,
    );
    console.log(
      '| round | one at a time: answered 200 | its p50 without the hammering (ms) | beside it | ratio | hammering parent (status: count) | profiles without (req/s) | beside | ratio |',
    );
    console.log('|---|---|---|---|---|---|---|---|---|');
    rows.forEach(({ aloneSearches, besideSearches, aloneProfiles, besideProfiles, hammer }, i) => {
      const alone = median(aloneSearches.map((answer) => answer.ms));
      const beside = median(besideSearches.map((answer) => answer.ms));
      const answered = besideSearches.filter((answer) => answer.status === 200).length;
      const statuses = [...hammer]
        .sort(([a], [b]) => a - b)
        .map(([status, count]) => `${status}: ${count}`)
        .join(', ');
      console.log(
        `| ${i + 1} | ${answered} of ${besideSearches.length} | ${alone.toFixed(0)} | ${beside.toFixed(0)} | ${(beside / alone).toFixed(2)} | ${statuses} | ${aloneProfiles.toFixed(0)} | ${besideProfiles.toFixed(0)} | ${(besideProfiles / aloneProfiles).toFixed(2)} |`,
      );
    });
  }
} finally {
  server?.kill('SIGKILL');
  await database.close();
  cluster?.stop();
}
