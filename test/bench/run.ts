import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { mintAccessToken } from '../../src/auth/tokens.js';
import { openDatabase } from '../../src/db/database.js';
import { migrate } from '../../src/db/migrator.js';
import { seed } from '../../src/dev/demo-data.js';
import { freePort, postgresBinDir, startCluster, type Cluster } from '../helpers/postgres-cluster.js';
import { layerSplit, readProfile, SYSTEM_CALLS } from './layers.js';

/*
 * npm run bench: the product against the floor (one prepared pg query as JSON over node:http),
 * in one run on one database, each scenario measured by autocannon in a separate process.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));
const { values: args } = parseArgs({
  options: {
    children: { type: 'string', default: '100000' },
    /** Organizations of --children children each; the first one's parent is the one-token rows' caller. */
    organizations: { type: 'string', default: '1' },
    duration: { type: 'string', default: '10' },
    warmup: { type: 'string', default: '3' },
    connections: { type: 'string', default: '50' },
    soak: { type: 'string' },
    only: { type: 'string' },
    /** Profile the server's CPU and print its split by layer (per request when one server row ran). */
    profile: { type: 'boolean', default: false },
    users: { type: 'string', default: '50000' },
    /**
     * Idle live streams held open through the run (organizationChanged, one per user token): the rows' peak
     * RSS includes them.
     */
    streams: { type: 'string', default: '0' },
    signins: { type: 'string', default: '100' },
    json: { type: 'string', default: path.join(root, '.bench', 'results.json') },
    /** Another checkout, built there: its server runs beside this one, each row measured on both in turn. */
    compare: { type: 'string' },
    /**
     * Settings of the compared server only, `NAME=value,NAME=value`: with `--compare .`, this
     * checkout with a mechanism switched off (`CACHE_MAX_BYTES=0`) against itself.
     */
    'compare-env': { type: 'string' },
    /**
     * The compared server is this checkout with OpenTelemetry tracing on, sampling this share of
     * the requests (0.1, 1), exporting over OTLP/HTTP to a receiver in this process that reads and
     * discards: each row is measured traced and untraced in turn. Not with --compare.
     */
    tracing: { type: 'string' },
    /**
     * Measure every row this many times, in rounds, and report each row's median (by CPU a
     * request). With --compare the pair's order alternates from one round to the next: the
     * server measured first in a pair is often slower, whichever it is.
     */
    rounds: { type: 'string', default: '1' },
    /**
     * With --rounds: start the servers anew before each round. A server process keeps a bias (its
     * compiled code, its memory's layout) of up to 1.2x through a run; new processes each round
     * make the median one of several processes. Not with --profile (one profile a process).
     */
    restart: { type: 'boolean', default: false },
    /**
     * Each row's measured run is cut into this many slices, with a slice of the floor before each
     * and after the last (the sign-in writer paused in them): the row's ratio to the floor is over
     * those slices, so that a machine whose speed drifts weighs on both alike (a floor measured
     * once a round, minutes before a row, drifted from it by up to 1.7x here). 1: one slice.
     */
    slices: { type: 'string', default: '4' },
  },
});
if (args.restart && Number(args.streams) > 0)
  throw new Error('--restart and --streams do not go together: the streams are opened once, on the first server');
if (args.tracing && args.compare)
  throw new Error('--tracing and --compare do not go together: --tracing compares this checkout with itself, traced');
if (args.restart && args.profile)
  throw new Error('--restart and --profile do not go together: the profile is of one server process');
const children = Number(args.children);
const organizations = Number(args.organizations);
const duration = Number(args.duration);
const connections = Number(args.connections);
const users = Number(args.users);
const signinsPerSecond = Number(args.signins);
const slices = Math.max(1, Math.floor(Number(args.slices)));
/** What GraphQL clients send (graphql-request, urql, recent Apollo Client). */
const CLIENT_ACCEPT = 'application/graphql-response+json, application/json;q=0.9';
const CLOCK_TICK_US = 1_000_000 / Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim() || 100);

/** The process's CPU time so far in clock ticks: in user space and in the kernel (system calls, the network stack). */
function cpuTicks(pid: number): { user: number; system: number; main: number } {
  const read = (file: string) => readFileSync(file, 'utf8').split(') ')[1]!.split(' ');
  const [fields, main] = [read(`/proc/${pid}/stat`), read(`/proc/${pid}/task/${pid}/stat`)];
  // Of which the main thread's (JavaScript), the rest the collector's helpers and libuv's pool.
  return { user: Number(fields[11]), system: Number(fields[12]), main: Number(main[11]) + Number(main[12]) };
}
function rssMb(pid: number, field: 'VmRSS' | 'VmHWM'): number {
  const line = readFileSync(`/proc/${pid}/status`, 'utf8')
    .split('\n')
    .find((l) => l.startsWith(field))!;
  return Math.round(Number(line.split(/\s+/)[1]) / 1024);
}

/** The median of some figures (the lower middle one of an even count). */
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor((values.length - 1) / 2)]!;

/** Until `url` answers; with `ok`, until it answers 2xx (a server's /readyz once it takes requests). */
async function waitFor(url: string, ok = false): Promise<void> {
  for (let i = 0; i < 300; i++) {
    try {
      const answer = await fetch(url);
      await answer.arrayBuffer();
      if (!ok || answer.ok) return;
      await new Promise((r) => setTimeout(r, 100));
    } catch {
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  throw new Error(`${url} did not come up`);
}

/**
 * The connections of a row of one client (one address, one token): below its part of the requests in
 * progress (a quarter of the bound, 44 at the default budget), past which the rest are answered 429.
 */
const ONE_CLIENT_CONNECTIONS = 40;

type Scenario = {
  name: string;
  url: string;
  method?: string;
  headers?: Record<string, string>;
  body?: string;
  target?: number;
  /** Concurrent connections (default --connections); 1 measures a single caller's latency. */
  connections?: number;
  /** A file of bearer tokens, one per line: each request sends a random one (many users). */
  tokensFile?: string;
  /** The sign-in writer runs during this row. */
  signins?: boolean;
  /** Measured on the `--compare` checkout's server. */
  compared?: boolean;
};

type Run = { rps: number; p50: number; p99: number; requests: number; seconds: number; non2xx: number };

/** `prime`: each of the tokens once, in order (those from `prime.from` up to `prime.to`). */
function autocannon(s: Scenario, seconds: number, prime?: { from: number; to: number }): Run {
  let argv: string[];
  if (s.tokensFile) {
    const options = {
      url: s.url,
      method: s.method,
      headers: s.headers,
      body: s.body,
      tokensFile: s.tokensFile,
      connections: s.connections ?? connections,
      duration: seconds,
      prime: prime !== undefined,
      ...prime,
    };
    argv = [path.join(root, 'test', 'bench', 'load.mjs'), JSON.stringify(options)];
  } else {
    argv = [
      path.join(root, 'node_modules', 'autocannon', 'autocannon.js'),
      '-j',
      '-c',
      String(s.connections ?? connections),
      '-d',
      String(seconds),
      '-m',
      s.method ?? 'GET',
    ];
    for (const [k, v] of Object.entries(s.headers ?? {})) argv.push('-H', `${k}=${v}`);
    if (s.body) argv.push('-b', s.body);
    argv.push(s.url);
  }
  const run = spawnSync(process.execPath, argv, { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  const result = JSON.parse(run.stdout);
  return {
    // Over the run's own length (a short run's per-second samples leave its last part out).
    rps: result.requests.total / Math.max(0.01, result.duration),
    seconds: result.duration,
    p50: result.latency.p50,
    p99: result.latency.p99,
    requests: result.requests.total,
    non2xx: result.non2xx + result.errors,
  };
}

async function transactions(client: pg.Client, db: string): Promise<number> {
  const { rows } = await client.query<{ n: string }>(
    'SELECT xact_commit + xact_rollback AS n FROM pg_stat_database WHERE datname = $1',
    [db],
  );
  return Number(rows[0]!.n);
}

async function vacuum(databaseUrl: string): Promise<void> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    await client.query('VACUUM ANALYZE');
  } finally {
    await client.end();
  }
}

let cluster: Cluster | undefined;
const processes: ChildProcess[] = [];
try {
  let baseUrl = process.env.BENCH_DATABASE_URL;
  if (!baseUrl) {
    const bin = postgresBinDir();
    if (!bin) throw new Error('no PostgreSQL server binaries and no BENCH_DATABASE_URL');
    cluster = await startCluster(bin);
    baseUrl = cluster.url;
  }
  const admin = new pg.Client({ connectionString: baseUrl });
  await admin.connect();
  const dbName = `bench_${process.pid}`;
  await admin.query(`CREATE DATABASE ${dbName}`);
  const url = new URL(baseUrl);
  url.pathname = `/${dbName}`;
  const databaseUrl = url.toString();

  console.log(`seeding ${organizations} organization(s) of ${children} children…`);
  const database = await openDatabase({ url: databaseUrl });
  await migrate(database.sql);
  const started = performance.now();
  const seeded = await seed(database, { organizations, childrenPerOrganization: children, seed: 1, now: new Date() });
  const [big] = seeded;
  console.log(`seeded in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  const org = await database.prisma.organization.findUniqueOrThrow({ where: { parentId: big!.parent.userID } });
  // Each organization's signing secret and public key, for its children's tokens.
  const signers = new Map(
    (
      await database.prisma.organization.findMany({
        select: { parentId: true, jwtSecret: true, parent: { select: { publicKey: true } } },
      })
    ).map((o) => [o.parentId, { secret: o.jwtSecret, kid: o.parent.publicKey }]),
  );
  const child = await database.prisma.account.findFirstOrThrow({ where: { parentId: org.parentId, status: 'active' } });
  await database.close();
  // A bulk load leaves GIN pending lists and no visibility map: settle them first, as autovacuum
  // would in steady state, so that it does not run (and compete for the CPU) during the measurements.
  await vacuum(databaseUrl);
  const mint = (subject: string) =>
    mintAccessToken({ secret: org.jwtSecret, kid: big!.parent.publicKey, subject, ttlSeconds: 24 * 3600 });
  const parentToken = await mint(big!.parent.userID);
  const childToken = await mint(child.id);
  // Many users: distinct active children drawn at random from every organization, each with its own token.
  const benchDir = path.join(root, '.bench');
  mkdirSync(benchDir, { recursive: true });
  const tokensFile = path.join(benchDir, 'tokens.txt');
  const childIdsFile = path.join(benchDir, 'child-ids.txt');
  /** The callers the many-users rows draw from (fewer than --users when fewer children are active). */
  let population = 0;
  if (users > 0) {
    const reader = new pg.Client({ connectionString: databaseUrl });
    await reader.connect();
    const callers = await (async () => {
      try {
        // md5(id): an order unrelated to the organizations or to when the accounts were made.
        const { rows } = await reader.query<{ id: string; parentId: string }>(
          `SELECT id, "parentId" FROM "Account" WHERE type = 'child' AND status = 'active' ORDER BY md5(id) LIMIT $1`,
          [users],
        );
        // The sign-ins spend credits; no organization may run dry during the run (its children
        // would be refused, which is not the case measured).
        await reader.query(`UPDATE "Organization" SET "creditBalance" = GREATEST("creditBalance", 10000000)`);
        return rows;
      } finally {
        await reader.end();
      }
    })();
    if (callers.length < users) console.log(`only ${callers.length} active children: --users ${callers.length}`);
    writeFileSync(childIdsFile, `${callers.map((caller) => caller.id).join('\n')}\n`);
    const minting = performance.now();
    const tokens: string[] = [];
    for (let from = 0; from < callers.length; from += 1000) {
      tokens.push(
        ...(await Promise.all(
          callers.slice(from, from + 1000).map(({ id, parentId }) => {
            const signer = signers.get(parentId)!;
            return mintAccessToken({ secret: signer.secret, kid: signer.kid, subject: id, ttlSeconds: 24 * 3600 });
          }),
        )),
      );
    }
    writeFileSync(tokensFile, `${tokens.join('\n')}\n`);
    population = tokens.length;
    console.log(
      `${tokens.length.toLocaleString('en')} tokens minted in ${((performance.now() - minting) / 1000).toFixed(1)} s`,
    );
  }

  spawnSync('npm', ['run', '-s', 'build'], { cwd: root, stdio: 'inherit' });
  const [appPort, floorPort, ceilingPort] = [await freePort(), await freePort(), await freePort()];
  const streams = Number(args.streams);
  const env = {
    ...process.env,
    NODE_ENV: 'production',
    DATABASE_URL: databaseUrl,
    PORT: String(appPort),
    HOST: '127.0.0.1',
    LOG_LEVEL: 'warn',
    RATE_LIMIT_PER_ADDRESS: '0',
    RATE_LIMIT_PER_CREDENTIAL: '0',
    // The many-users rows send each user's address as a load balancer would (load.mjs): each is a
    // client of its own, not 50 connections of one address holding its part of the requests in progress.
    TRUST_PROXY: 'loopback',
    SEED_DEMO_ON_START: 'false',
    // The streams are one organization's: its bound is lifted, the instance's stays the budget's.
    ...(streams > 0 ? { LIVE_MAX_PER_ORGANIZATION: String(streams) } : {}),
  };
  // The server runs as `npm start` runs it (same Node flags, such as the heap limit).
  const startScript = (
    JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { scripts: { start: string } }
  ).scripts.start;
  // BENCH_APP_FLAGS adds Node flags for the server only (for example --cpu-prof to profile it).
  const profileDir = path.join(root, '.bench', 'profile');
  if (args.profile) rmSync(profileDir, { recursive: true, force: true });
  // The memory budget's heap flag, as the script computes it (`$(node dist/cli/heap-flag.js)`).
  const heapFlag = spawnSync(process.execPath, [path.join(root, 'dist', 'cli', 'heap-flag.js')], {
    env,
    encoding: 'utf8',
  }).stdout.trim();
  const nodeFlags = [
    ...startScript.split(/\s+/).filter((word) => word.startsWith('--')),
    ...(heapFlag ? [heapFlag] : []),
    ...(process.env.BENCH_APP_FLAGS?.split(/\s+/).filter(Boolean) ?? []),
    ...(args.profile ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : []),
  ];
  // And with the environment the script sets before `node` (NAME=value words).
  const startEnv = Object.fromEntries(
    startScript
      .split(/\s+/)
      .filter((word) => /^[A-Z_]+=/.test(word))
      .map((word) => word.split('=', 2) as [string, string]),
  );
  // BENCH_APP_STDOUT: a file for the server's standard output (where --trace-gc writes).
  const appStdout = process.env.BENCH_APP_STDOUT ? openSync(process.env.BENCH_APP_STDOUT, 'w') : 'ignore';
  const startApp = () => {
    const started = spawn(process.execPath, [...nodeFlags, path.join(root, 'dist', 'main.js')], {
      env: { ...env, ...startEnv },
      stdio: ['ignore', appStdout, 'inherit'],
    });
    processes.push(started);
    return started;
  };
  let app = startApp();
  // --compare: the other checkout's server, built there, with the same flags on the same database.
  const comparePort = await freePort();
  const compared = args.compare ? path.resolve(args.compare) : args.tracing ? root : undefined;
  if (args.compare) spawnSync('npm', ['run', '-s', 'build'], { cwd: compared, stdio: 'inherit' });
  // --tracing: the collector's part, a receiver that reads each export and answers it.
  const sink = { exports: 0, bytes: 0 };
  const tracingEnv: Record<string, string> = {};
  if (args.tracing) {
    const receiver = createServer((request, response) => {
      request.on('data', (chunk: Buffer) => (sink.bytes += chunk.length));
      request.on('end', () => {
        sink.exports += 1;
        response.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    receiver.unref();
    Object.assign(tracingEnv, {
      OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`,
      OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
      OTEL_TRACES_SAMPLER_ARG: args.tracing,
    });
  }
  const compareEnv = Object.fromEntries(
    (args['compare-env'] ?? '')
      .split(',')
      .filter(Boolean)
      .map((pair) => [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1)]),
  );
  const compareLabel = args.tracing ? `[traced ${Math.round(Number(args.tracing) * 100)} %]` : '[compare]';
  const startOther = (checkout: string) => {
    const started = spawn(
      process.execPath,
      [...nodeFlags.filter((flag) => !flag.startsWith('--cpu-prof')), path.join(checkout, 'dist', 'main.js')],
      {
        env: { ...env, ...startEnv, ...tracingEnv, ...compareEnv, PORT: String(comparePort) },
        stdio: ['ignore', 'ignore', 'inherit'],
      },
    );
    processes.push(started);
    return started;
  };
  let other = compared ? startOther(compared) : undefined;
  const floor = spawn(process.execPath, [path.join(root, 'test', 'bench', 'floor.mjs')], {
    env: { ...env, PORT: String(floorPort), FLOOR_ACCOUNT_ID: big!.parent.userID },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  processes.push(floor);
  const base = `http://127.0.0.1:${appPort}`;
  const compareBase = `http://127.0.0.1:${comparePort}`;
  await Promise.all([
    waitFor(`${base}/health`),
    waitFor(`http://127.0.0.1:${floorPort}/`),
    ...(other ? [waitFor(`${compareBase}/health`)] : []),
  ]);
  // The ceiling answers the floor's bytes from memory.
  const ceilingBody = await (await fetch(`http://127.0.0.1:${floorPort}/`)).text();
  const ceiling = spawn(process.execPath, [path.join(root, 'test', 'bench', 'ceiling.mjs')], {
    env: { ...env, PORT: String(ceilingPort), CEILING_BODY: ceilingBody },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  processes.push(ceiling);
  await waitFor(`http://127.0.0.1:${ceilingPort}/`);

  // The page token at depth 10,000, reached by walking the list.
  const walk = await (async () => {
    let lastKey: string | undefined;
    for (let fetched = 0; fetched < Math.min(children - 100, 10_000); fetched += 100) {
      const page = (await (
        await fetch(
          `${base}/auth/child-accounts?limit=100${lastKey ? `&lastKey=${encodeURIComponent(lastKey)}` : ''}`,
          { headers: { authorization: `Bearer ${parentToken}` } },
        )
      ).json()) as any;
      lastKey = page.data.data.pagination.nextPageToken;
    }
    return lastKey!;
  })();

  // --streams: idle streams of distinct callers, held open while every row runs.
  if (streams > 0) {
    if (users === 0) throw new Error('--streams needs --users: each stream is a user token');
    const client = spawn(
      process.execPath,
      [
        path.join(root, 'test', 'bench', 'sse-clients.mjs'),
        base,
        `@${tokensFile}`,
        String(streams),
        'subscription { organizationChanged { organizationName } }',
      ],
      {
        stdio: ['ignore', 'pipe', 'ignore'],
      },
    );
    processes.push(client);
    const line = await new Promise<string>((resolve) =>
      client.stdout!.once('data', (chunk: Buffer) => resolve(chunk.toString().split('\n')[0]!)),
    );
    const { ready, failed } = JSON.parse(line) as { ready: number; failed: number };
    console.log(`  (streams: ${ready} open, ${failed} refused; server RSS ${rssMb(app.pid!, 'VmRSS')} MB)`);
  }
  const auth = (token: string) => ({ authorization: `Bearer ${token}` });
  const gql = (query: string, token = parentToken, accept?: string): Partial<Scenario> => ({
    method: 'POST',
    headers: { ...auth(token), 'content-type': 'application/json', ...(accept ? { accept } : {}) },
    body: JSON.stringify({ query }),
  });
  /** Many users: a random child token per request, while the sign-in service writes. */
  const many = (scenario: Partial<Scenario>): Partial<Scenario> => {
    const headers = { ...scenario.headers };
    delete headers.authorization;
    return { ...scenario, headers, tokensFile, signins: signinsPerSecond > 0 };
  };
  const accounts = organizations * children;
  const crowd = `${users.toLocaleString('en')} users${organizations > 1 ? ` of ${accounts.toLocaleString('en')}` : ''}${signinsPerSecond > 0 ? `, ${signinsPerSecond} sign-ins/s` : ''}`;
  const childProfileFields =
    'userID username email publicKey accountType parentAccount accountStatus emailVerified createdAt updatedAt lastLogin organizationName domainRestrictionEnabled emailVerificationRequired authProvider lastLoginProvider providerAId childSignupCount signInCount emailConfirmationCount providerAAuthCount providerBAuthCount providerCAuthCount providerDAuthCount lastPasswordChanged loginAttempts lastLoginAttempt lockedUntil lastResetPasswordRequestAt';
  const profileFields =
    'userID username email publicKey accountType parentAccount accountStatus emailVerified createdAt updatedAt lastLogin organizationName domainRestrictionEnabled emailVerificationRequired authProvider lastLoginProvider providerAId childSignupCount signInCount emailConfirmationCount providerAAuthCount providerBAuthCount providerCAuthCount providerDAuthCount lastPasswordChanged loginAttempts lastLoginAttempt lockedUntil lastResetPasswordRequestAt ... on ParentAccount { organizationUrl authUrls { signin signup } creditBalance totalFreeUsers billableChildAccounts totalChildAccounts packagesHistory { packageType purchaseDate creditsAdded freeUsersAdded price transactionId } accountBalance availableBalance providerASsoConfig { enabled clientId } lastLowCreditNotificationAt lastCriticalCreditNotificationAt lastDepletedCreditNotificationAt }';
  const dashboard = `{ me { ${profileFields} } organization { organizationName credentials { publicKey jwtSecret } } creditAnalysis { creditBalance totalCreditsUsed projectedMonthlyUsage alerts { low critical depleted } } childAccounts(limit: 50) { edges { node { username email lastSeen registered } } pageInfo { hasNextPage endCursor } stats { total active } } }`;
  const organizationQuery =
    '{ organization { organizationName organizationUrl authUrls { signin signup verify reset update resend successful } domainRestrictionEnabled emailVerificationRequired providerASsoConfig { enabled clientId } credentials { publicKey jwtSecret } } }';
  const scenarios: Scenario[] = [
    { name: 'floor: one prepared pg query', url: `http://127.0.0.1:${floorPort}/` },
    { name: 'ceiling: the same bytes from memory', url: `http://127.0.0.1:${ceilingPort}/` },
    // The request of the one-token GraphQL `me` row, its body read and parsed as JSON, the same bytes answered.
    {
      name: 'ceiling: the same bytes for a GraphQL POST',
      url: `http://127.0.0.1:${ceilingPort}/`,
      ...gql(`{ me { ${profileFields} } }`),
    },
    { name: 'healthz', url: `${base}/healthz` },
    { name: 'REST profile (parent)', url: `${base}/auth/user-profile`, headers: auth(parentToken), target: 0.5 },
    { name: 'REST profile (child)', url: `${base}/auth/user-profile`, headers: auth(childToken), target: 0.5 },
    {
      name: 'REST organization (JWT)',
      url: `${base}/auth/organization-details`,
      headers: auth(parentToken),
      target: 0.3,
    },
    {
      name: 'REST organization (public key)',
      url: `${base}/auth/organization-details`,
      headers: { 'x-public-key': big!.parent.publicKey },
      target: 0.3,
    },
    {
      name: 'REST child accounts, first page',
      url: `${base}/auth/child-accounts`,
      headers: auth(parentToken),
      target: 0.3,
    },
    {
      name: 'REST child accounts, depth 10,000',
      url: `${base}/auth/child-accounts?lastKey=${encodeURIComponent(walk)}`,
      headers: auth(parentToken),
    },
    {
      name: 'REST child accounts, search',
      url: `${base}/auth/child-accounts?search=smith`,
      headers: auth(parentToken),
    },
    {
      name: 'REST child accounts, date range',
      url: `${base}/auth/child-accounts?startDate=2025-06-01&endDate=2025-06-30`,
      headers: auth(parentToken),
    },
    {
      name: 'REST child accounts, search, 1 caller',
      url: `${base}/auth/child-accounts?search=smith`,
      headers: auth(parentToken),
      connections: 1,
    },
    {
      name: 'REST child accounts, date range, 1 caller',
      url: `${base}/auth/child-accounts?startDate=2025-06-01&endDate=2025-06-30`,
      headers: auth(parentToken),
      connections: 1,
    },
    {
      name: 'REST child accounts, first page, 1 caller',
      url: `${base}/auth/child-accounts`,
      headers: auth(parentToken),
      connections: 1,
    },
    {
      name: 'REST child accounts, depth 10,000, 1 caller',
      url: `${base}/auth/child-accounts?lastKey=${encodeURIComponent(walk)}`,
      headers: auth(parentToken),
      connections: 1,
    },
    { name: 'REST credit analysis', url: `${base}/parent/credit-analysis`, headers: auth(parentToken), target: 0.3 },
    {
      name: 'GraphQL me (REST profile fields)',
      url: `${base}/graphql`,
      ...gql(`{ me { ${profileFields} } }`),
      target: 0.5,
    },
    { name: 'GraphQL organization', url: `${base}/graphql`, ...gql(organizationQuery) },
    {
      name: 'GraphQL childAccounts',
      url: `${base}/graphql`,
      ...gql(
        '{ childAccounts { edges { node { username email lastSeen registered } } pageInfo { hasNextPage endCursor } stats { total active } } }',
      ),
    },
    {
      name: 'GraphQL creditAnalysis',
      url: `${base}/graphql`,
      ...gql(
        '{ creditAnalysis { creditBalance totalFreeUsers totalChildAccounts billableUsers monthlyRetentionCredits operationUsage { childSignups signIns emailVerifications socialSignIns { providerA providerB providerC providerD total } } totalCreditsUsed projectedMonthlyUsage alerts { low critical depleted } packageHistory { packageType purchaseDate creditsAdded freeUsersAdded price transactionId } } }',
      ),
    },
    { name: 'GraphQL dashboard (all four)', url: `${base}/graphql`, ...gql(dashboard) },
    {
      name: 'GraphQL me, client Accept',
      url: `${base}/graphql`,
      ...gql(`{ me { ${profileFields} } }`, parentToken, CLIENT_ACCEPT),
    },
    {
      name: 'GraphQL dashboard, client Accept',
      url: `${base}/graphql`,
      ...gql(dashboard, parentToken, CLIENT_ACCEPT),
      target: 0.3,
    },
    ...(users > 0
      ? ([
          { name: `REST profile (child), ${crowd}`, url: `${base}/auth/user-profile`, ...many({}), target: 1.0 },
          {
            name: `REST organization (JWT), ${crowd}`,
            url: `${base}/auth/organization-details`,
            ...many({}),
            target: 1.0,
          },
          {
            name: `GraphQL me, client Accept, ${crowd}`,
            url: `${base}/graphql`,
            ...many(gql(`{ me { ${childProfileFields} } }`, childToken, CLIENT_ACCEPT)),
            target: 0.8,
          },
          {
            name: `GraphQL organization, client Accept, ${crowd}`,
            url: `${base}/graphql`,
            ...many(gql(organizationQuery, childToken, CLIENT_ACCEPT)),
            target: 0.8,
          },
          // The parent's own views while its organization's users sign in (its row, balance and usage change
          // each time).
          {
            name: `REST credit analysis, ${signinsPerSecond} sign-ins/s`,
            url: `${base}/parent/credit-analysis`,
            headers: auth(parentToken),
            signins: signinsPerSecond > 0,
            target: 0.8,
          },
          {
            name: `GraphQL dashboard, client Accept, ${signinsPerSecond} sign-ins/s`,
            url: `${base}/graphql`,
            ...gql(dashboard, parentToken, CLIENT_ACCEPT),
            signins: signinsPerSecond > 0,
            target: 0.5,
          },
        ] as Scenario[])
      : []),
    // --only "a|b": the scenarios whose name contains any of the texts.
  ]
    .filter(
      (s) => !args.only || args.only.split('|').some((text) => s.name.includes(text)) || s.name.startsWith('floor'),
    )
    .map((s: Scenario): Scenario =>
      s.tokensFile || s.connections || !s.url.startsWith(base)
        ? s
        : { ...s, connections: Math.min(connections, ONE_CLIENT_CONNECTIONS) },
    )
    // --compare: each of the server's rows, then the same on the other checkout's server.
    .flatMap((s) =>
      other && s.url.startsWith(base)
        ? [s, { ...s, name: `${s.name} ${compareLabel}`, url: compareBase + s.url.slice(base.length), compared: true }]
        : [s],
    );

  const stats = new pg.Client({ connectionString: databaseUrl });
  await stats.connect();
  type Row = {
    scenario: string;
    measuredUs: [number, number];
    rps: number;
    p50: number;
    p99: number;
    cpuUsPerRequest: number;
    gcShare?: number;
    systemUsPerRequest: number;
    otherThreadsUsPerRequest: number;
    dbTxPerRequest: number;
    peakRssMb: number;
    ratioToFloor: number;
    floorRps: number;
    non2xx: number;
    cacheHitRatio?: number;
    executionsPerRequest?: number;
    target?: number;
  };
  /** The server's entity-cache lookups so far, from its /metrics. */
  /**
   * The server's metrics; asked again once if a kept-alive connection was closed under the request (the
   * server's idle timeout).
   */
  const metricsOf = async (server: string): Promise<string> => {
    try {
      return await (await fetch(`${server}/metrics`)).text();
    } catch {
      return await (await fetch(`${server}/metrics`)).text();
    }
  };
  const cacheLookups = async (server: string) => {
    const text = await metricsOf(server);
    const read = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1] ?? 0);
    // Executions by engine, summed: the GraphQL requests that ran the pipeline (not answered shared).
    const executions = [...text.matchAll(/^api_graphql_executions_total\{[^}]*\} (\S+)$/gm)].reduce(
      (sum, match) => sum + Number(match[1]),
      0,
    );
    // The collector's pauses, all kinds summed (prom-client's default metrics).
    const gcSeconds = [...text.matchAll(/^nodejs_gc_duration_seconds_sum\{[^}]*\} (\S+)$/gm)].reduce(
      (sum, match) => sum + Number(match[1]),
      0,
    );
    return {
      hits: read('api_cache_hits_total'),
      misses: read('api_cache_misses_total'),
      executions,
      gcSeconds,
    };
  };
  const floorScenario = scenarios.find((s) => s.name.startsWith('floor'))!;
  /** Whether a row is measured between slices of the floor, its ratio to them (see --slices). */
  const sliced = (name: string) => slices > 1 && !name.startsWith('floor');
  const total = (runs: Run[], figure: 'requests' | 'seconds' | 'non2xx') =>
    runs.reduce((sum, run) => sum + run[figure], 0);
  /** Requests a second over several runs: their requests over their seconds. */
  const overRuns = (runs: Run[]) => total(runs, 'requests') / Math.max(0.01, total(runs, 'seconds'));
  const rows: Row[] = [];
  /** The measured runs of the server's rows, in µs of the monotonic clock the CPU profile's timestamps use. */
  const measured: { scenario: string; window: [number, number] }[] = [];
  let floorRps = 0;
  const rounds = Math.max(1, Number(args.rounds));
  // Each round measures every row once; a compared pair in one order, then in the other.
  const sequence = Array.from({ length: rounds }, (_, round) =>
    scenarios.flatMap((s, i) => {
      if (s.compared) return [];
      const twin = scenarios[i + 1]?.compared ? scenarios[i + 1]! : undefined;
      return twin === undefined ? [s] : round % 2 === 0 ? [s, twin] : [twin, s];
    }),
  ).flat();
  const measurements = new Map<string, Row[]>();
  const perRound = sequence.length / rounds;
  for (const [index, scenario] of sequence.entries()) {
    // --restart: new server processes for every round after the first (see its option).
    if (args.restart && index > 0 && index % perRound === 0) {
      const stopping = [app, ...(other ? [other] : [])];
      for (const p of stopping) p.kill('SIGTERM');
      await Promise.all(
        stopping.map(
          (p) =>
            new Promise((resolve) =>
              p.exitCode !== null || p.signalCode !== null ? resolve(null) : p.on('exit', resolve),
            ),
        ),
      );
      processes.splice(0, processes.length, ...processes.filter((p) => !stopping.includes(p)));
      app = startApp();
      other = compared ? startOther(compared) : undefined;
      await Promise.all([waitFor(`${base}/readyz`, true), ...(other ? [waitFor(`${compareBase}/readyz`, true)] : [])]);
    }
    const pid = scenario.name.startsWith('floor')
      ? floor.pid!
      : scenario.name.startsWith('ceiling')
        ? ceiling.pid!
        : scenario.compared
          ? other!.pid!
          : app.pid!;
    const server = scenario.compared ? compareBase : base;
    const writer = scenario.signins
      ? spawn(process.execPath, [path.join(root, 'test', 'bench', 'signins.mjs')], {
          env: { ...env, CHILD_IDS_FILE: childIdsFile, SIGNINS_PER_SECOND: String(signinsPerSecond) },
          stdio: ['pipe', 'ignore', 'pipe'],
        })
      : undefined;
    let written = '';
    writer?.stderr!.on('data', (chunk) => (written += chunk));
    const bracketed = sliced(scenario.name);
    /** A slice of the floor beside this row, with the sign-in writer paused (the floor is measured without it). */
    const floorSlice = (seconds: number): Run => {
      writer?.stdin!.write('pause\n');
      const run = autocannon(floorScenario, seconds);
      writer?.stdin!.write('resume\n');
      return run;
    };
    // Many users: first every user once, as a server that has been up a while has seen them
    // (what is measured is the steady state, with the cache's hit ratio printed), then the warm-up.
    if (scenario.tokensFile) {
      // In slices too, the floor measured before each and after the last.
      const before = bracketed ? [floorSlice(duration / slices)] : [];
      const passes: Run[] = [];
      for (let slice = 0, parts = bracketed ? slices : 1; slice < parts; slice++) {
        passes.push(
          autocannon(scenario, 0, {
            from: Math.floor((population * slice) / parts),
            to: Math.floor((population * (slice + 1)) / parts),
          }),
        );
        if (bracketed) before.push(floorSlice(duration / slices));
      }
      const primed = { rps: overRuns(passes), requests: total(passes, 'requests'), non2xx: total(passes, 'non2xx') };
      // How full the entity cache is after them, of its share of the memory budget.
      const text = await metricsOf(server);
      const share = (name: string) =>
        Number(new RegExp(`^${name}\\{share="entityCache"\\} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
      const full = Math.round((100 * share('api_memory_share_used_bytes')) / share('api_memory_share_bytes'));
      // The cold pass: each caller's first request, on a server that has not seen it (against the floor just
      // before and after it).
      const floorNow = bracketed ? overRuns(before) : floorRps;
      const cold = floorNow > 0 ? `, x${(primed.rps / floorNow).toFixed(2)} the floor` : '';
      console.log(
        `  (primed: each of the ${population.toLocaleString('en')} users once, ${primed.requests} requests, ${primed.non2xx} not 2xx, ${Math.round(primed.rps)} req/s${cold}; the entity cache ${full} % of its share)`,
      );
    }
    autocannon(scenario, Number(args.warmup));
    const ofApp = pid === app.pid || pid === other?.pid;
    // The row's slices, each measured on its own: the server's CPU, the database's transactions
    // and the cache's lookups summed over them alone, not over the floor's slices between them.
    const runs: Run[] = [];
    const floors: Run[] = bracketed ? [floorSlice(duration / slices)] : [];
    const sum = {
      user: 0,
      system: 0,
      main: 0,
      tx: 0,
      hits: 0,
      misses: 0,
      executions: 0,
      gcSeconds: 0,
    };
    let window: [number, number] | undefined;
    for (let slice = 0; slice < (bracketed ? slices : 1); slice++) {
      const [ticks, tx] = [cpuTicks(pid), await transactions(stats, dbName)];
      const lookups = ofApp ? await cacheLookups(server) : undefined;
      const started = Number(process.hrtime.bigint() / 1000n);
      runs.push(autocannon(scenario, bracketed ? duration / slices : duration));
      const ended = Number(process.hrtime.bigint() / 1000n);
      window = [window?.[0] ?? started, ended];
      if (pid === app.pid) measured.push({ scenario: scenario.name, window: [started, ended] });
      const [ticksAfter, txAfter] = [cpuTicks(pid), await transactions(stats, dbName)];
      const lookupsAfter = ofApp ? await cacheLookups(server) : undefined;
      sum.user += ticksAfter.user - ticks.user;
      sum.system += ticksAfter.system - ticks.system;
      sum.main += ticksAfter.main - ticks.main;
      // Each statement outside a transaction is one; the stats query itself adds one per reading.
      sum.tx += txAfter - tx - 1;
      if (lookups && lookupsAfter)
        for (const key of ['hits', 'misses', 'executions', 'gcSeconds'] as const)
          sum[key] += lookupsAfter[key] - lookups[key];
      if (bracketed) floors.push(floorSlice(duration / slices));
    }
    const result = {
      rps: overRuns(runs),
      requests: total(runs, 'requests'),
      // The slices' latencies: the middle of their medians, the worst of their 99th percentiles.
      p50: median(runs.map((run) => run.p50)),
      p99: Math.max(...runs.map((run) => run.p99)),
      non2xx: total(runs, 'non2xx'),
    };
    const { hits, misses, executions } = sum;
    const cpuSeconds = ((sum.user + sum.system) * CLOCK_TICK_US) / 1e6;
    const gcShare = ofApp && cpuSeconds > 0 ? Number((sum.gcSeconds / cpuSeconds).toFixed(2)) : undefined;
    if (writer) {
      writer.kill('SIGTERM');
      await new Promise((resolve) => writer.on('exit', resolve));
      const report = JSON.parse(written.trim() || '{}') as { written?: number; seconds?: number };
      console.log(
        `  (sign-in writer: ${report.written ?? '?'} sign-ins in ${report.seconds?.toFixed(1) ?? '?'} s; its transactions count in "db tx")`,
      );
    }
    if (scenario.name.startsWith('floor')) floorRps = result.rps;
    // The floor beside the row: its slices between the row's, or the round's.
    const floorBeside = bracketed ? overRuns(floors) : floorRps;
    const row: Row = {
      scenario: scenario.name,
      measuredUs: window!,
      rps: Math.round(result.rps),
      p50: result.p50,
      p99: result.p99,
      cpuUsPerRequest: Math.round(((sum.user + sum.system) * CLOCK_TICK_US) / Math.max(1, result.requests)),
      // Of which in the kernel: the same read and write a request on every path (strace -c), so rows compare
      // best on the rest.
      systemUsPerRequest: Math.round((sum.system * CLOCK_TICK_US) / Math.max(1, result.requests)),
      // Outside the main thread: the collector's helper threads (concurrent marking, sweeping) and libuv's pool.
      otherThreadsUsPerRequest: Math.round(
        ((sum.user + sum.system - sum.main) * CLOCK_TICK_US) / Math.max(1, result.requests),
      ),
      dbTxPerRequest: Number((sum.tx / Math.max(1, result.requests)).toFixed(2)),
      peakRssMb: rssMb(pid, 'VmHWM'),
      // The collector's pauses over the server's CPU in the row.
      ...(gcShare === undefined ? {} : { gcShare }),
      ratioToFloor: Number((result.rps / floorBeside).toFixed(2)),
      floorRps: Math.round(floorBeside),
      non2xx: result.non2xx,
      ...(hits + misses > 0 ? { cacheHitRatio: Number((hits / (hits + misses)).toFixed(2)) } : {}),
      // GraphQL requests that ran an execution (the rest were answered with the organization's shared answer).
      ...(scenario.url.endsWith('/graphql')
        ? { executionsPerRequest: Number((executions / Math.max(1, result.requests)).toFixed(2)) }
        : {}),
      target: scenario.target,
    };
    measurements.set(row.scenario, [...(measurements.get(row.scenario) ?? []), row]);
    if (rounds > 1) console.log(`round ${Math.floor(index / perRound) + 1}: ${format(row)}`);
    else rows.push(row);
  }
  if (rounds > 1) {
    // The median measurement of each row, by CPU a request (its other figures are that run's, but
    // for the ratio to the floor, the median of the rounds' ratios, and the peak memory, the highest).
    console.log(`\nmedians of ${rounds} rounds:`);
    for (const scenario of scenarios) {
      const runs = [...(measurements.get(scenario.name) ?? [])].sort((a, b) => a.cpuUsPerRequest - b.cpuUsPerRequest);
      if (runs.length === 0) continue;
      const ratioToFloor = median(runs.map((run) => run.ratioToFloor));
      rows.push({
        ...runs[Math.floor((runs.length - 1) / 2)]!,
        ratioToFloor,
        peakRssMb: Math.max(...runs.map((run) => run.peakRssMb)),
      });
    }
  }
  for (const row of rows) console.log(format(row));
  function format(row: Row): string {
    return `${row.scenario.padEnd(38)} ${String(row.rps).padStart(6)} req/s  p50 ${String(row.p50).padStart(4)} ms  p99 ${String(row.p99).padStart(4)} ms  ${String(row.cpuUsPerRequest).padStart(5)} µs CPU (${String(row.systemUsPerRequest).padStart(3)} sys, ${String(row.otherThreadsUsPerRequest).padStart(3)} off-main)  ${String(row.dbTxPerRequest).padStart(5)} db tx  ${String(row.peakRssMb).padStart(4)} MB  ${row.gcShare === undefined ? '   -' : row.gcShare.toFixed(2)} gc  ${row.cacheHitRatio === undefined ? '   -' : row.cacheHitRatio.toFixed(2)} hit  ${row.executionsPerRequest === undefined ? '   -' : row.executionsPerRequest.toFixed(2)} exec  x${row.ratioToFloor.toFixed(2)}${sliced(row.scenario) ? ` of ${row.floorRps}` : ''}${row.target ? ` (target ${row.target})` : ''}${row.non2xx ? `  non-2xx ${row.non2xx}` : ''}`;
  }
  const row = (name: string) => rows.find((r) => r.scenario === name);
  /**
   * A figure of two rows computed round by round (the rows of one round were measured minutes
   * apart at most, on the machine as it was then), and its median over the rounds.
   */
  const paired = (a: Row, b: Row, figure: (a: Row, b: Row) => number): number => {
    const [as, bs] = [measurements.get(a.scenario)!, measurements.get(b.scenario)!];
    return median(as.map((run, i) => figure(run, bs[i]!)));
  };
  const ratio = (a: Row, b: Row) => paired(a, b, (x, y) => x.cpuUsPerRequest / y.cpuUsPerRequest).toFixed(2);
  const cpuDifference = (a: Row, b: Row) => paired(a, b, (x, y) => x.cpuUsPerRequest - y.cpuUsPerRequest);
  const eachRound = rounds > 1 ? `, the median of the rounds' ratios` : '';
  // GraphQL beside REST for the same data, in this run: CPU a request as a ratio.
  const pairs: [string, string][] = [
    ['GraphQL me (REST profile fields)', 'REST profile (parent)'],
    ['GraphQL organization', 'REST organization (JWT)'],
    [`GraphQL me, client Accept, ${crowd}`, `REST profile (child), ${crowd}`],
    [`GraphQL organization, client Accept, ${crowd}`, `REST organization (JWT), ${crowd}`],
  ];
  for (const [graphql, rest] of pairs) {
    const [g, r] = [row(graphql), row(rest)];
    if (g && r)
      console.log(
        `${graphql} / ${rest}: ${ratio(g, r)}x the CPU a request (${g.cpuUsPerRequest} / ${r.cpuUsPerRequest} µs${eachRound})`,
      );
  }
  // --compare: each row's CPU a request here against the other checkout's, measured just after it.
  for (const theirs of rows.filter((r) => r.scenario.endsWith(` ${compareLabel}`))) {
    const ours = row(theirs.scenario.slice(0, -` ${compareLabel}`.length));
    if (!ours) continue;
    if (args.tracing)
      console.log(
        `${ours.scenario}: ${ours.cpuUsPerRequest} µs untraced, ${theirs.cpuUsPerRequest} µs traced (traced/untraced ${ratio(theirs, ours)}x${eachRound})`,
      );
    else
      console.log(
        `${ours.scenario}: ${ours.cpuUsPerRequest} µs here, ${theirs.cpuUsPerRequest} µs compared (${ratio(ours, theirs)}x${eachRound})`,
      );
  }
  if (args.tracing) console.log(`tracing: ${sink.exports} exports received, ${(sink.bytes / 1e6).toFixed(1)} MB`);
  // What taking a GraphQL request by POST costs on bare node:http (the body's events, its JSON), beside
  // what GraphQL `me` costs beyond the REST profile: the part of the difference that is framing.
  const [plain, posted, meByPost, restProfile] = [
    row('ceiling: the same bytes from memory'),
    row('ceiling: the same bytes for a GraphQL POST'),
    row('GraphQL me (REST profile fields)'),
    row('REST profile (parent)'),
  ];
  if (plain && posted && meByPost && restProfile) {
    const [framing, beyond] = [cpuDifference(posted, plain), cpuDifference(meByPost, restProfile)];
    console.log(
      `GraphQL me (REST profile fields) - REST profile (parent): ${beyond} µs CPU a request; the same POST on bare node:http: ${framing} µs more than a GET${rounds > 1 ? " (medians of the rounds' differences)" : ''}`,
    );
  }
  const [health, profile] = [row('healthz'), row('REST profile (parent)')];
  if (health && profile) {
    const total = cpuDifference(profile, health);
    const kernel = paired(profile, health, (a, b) => a.systemUsPerRequest - b.systemUsPerRequest);
    const each = rounds > 1 ? ", medians of the rounds' differences" : '';
    console.log(
      `REST profile (parent) - healthz: ${total} µs CPU a request (target ≤ 40; in user space ${total - kernel}, in the kernel ${kernel}${each})`,
    );
  }
  const [first, deep] = [row('REST child accounts, first page'), row('REST child accounts, depth 10,000')];
  if (first && deep) {
    console.log(
      `depth 10,000 vs first page: ${(deep.cpuUsPerRequest / first.cpuUsPerRequest).toFixed(2)}x the server CPU, ${(first.rps / deep.rps).toFixed(2)}x the time per request (target ≤ 1.2)`,
    );
  }
  let soak: { seconds: number; rssStartMb: number; rssEndMb: number } | undefined;
  if (args.soak) {
    const seconds = Number(args.soak);
    const scenario = scenarios.find((s) => s.name.startsWith('GraphQL dashboard'))!;
    autocannon(scenario, 10);
    const rssStartMb = rssMb(app.pid!, 'VmRSS');
    autocannon(scenario, seconds);
    const rssEndMb = rssMb(app.pid!, 'VmRSS');
    soak = { seconds, rssStartMb, rssEndMb };
    console.log(
      `soak ${seconds} s of the dashboard query: RSS ${rssStartMb} MB after warm-up, ${rssEndMb} MB at the end`,
    );
  }
  await stats.end();
  mkdirSync(path.dirname(args.json), { recursive: true });
  writeFileSync(
    args.json,
    JSON.stringify({ date: new Date().toISOString(), children, duration, connections, rows, soak, measured }, null, 2),
  );
  console.log(`results: ${args.json}`);
  for (const p of processes) p.kill('SIGTERM');
  await Promise.all(
    processes.map((p) => new Promise((resolve) => (p.exitCode !== null ? resolve(null) : p.on('exit', resolve)))),
  );
  if (args.profile) {
    const file = readdirSync(profileDir).find((name) => name.endsWith('.cpuprofile'));
    if (!file) throw new Error('the server wrote no CPU profile');
    // Each server row's split, of the samples taken during its measured runs alone (not the priming,
    // warm-up or start): shares of the samples outside idle and system calls, applied to the row's
    // CPU a request measured from /proc less the system calls' share of its busy samples.
    const appRows = rows.filter(
      (r) => !r.scenario.startsWith('floor') && !r.scenario.startsWith('ceiling') && !r.scenario.endsWith(compareLabel),
    );
    const profile = readProfile(path.join(profileDir, file));
    for (const row of appRows) {
      const perRequest = row.cpuUsPerRequest;
      console.log(`\nCPU by layer (${row.scenario}, ${perRequest} µs a request):`);
      const windows = measured.filter((run) => run.scenario === row.scenario).map((run) => run.window);
      const split = layerSplit(profile, windows);
      const running = perRequest * (1 - split.find((entry) => entry.layer === SYSTEM_CALLS)!.share);
      for (const { layer, share } of split) {
        const us = (layer === SYSTEM_CALLS ? perRequest : running) * share;
        console.log(
          `  ${layer.padEnd(58)} ${(share * 100).toFixed(1).padStart(5)} %  ${String(Math.round(us)).padStart(5)} µs`,
        );
      }
    }
  }
  await admin.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`).catch(() => {});
  await admin.end();
} finally {
  for (const p of processes) p.kill('SIGTERM');
  await new Promise((r) => setTimeout(r, 500));
  cluster?.stop();
}
