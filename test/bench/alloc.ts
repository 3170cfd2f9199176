import { spawn } from 'node:child_process';
import { Session } from 'node:inspector/promises';
import { PerformanceObserver, constants } from 'node:perf_hooks';
import type { AddressInfo } from 'node:net';
import { parseArgs } from 'node:util';
import { mintAccessToken } from '../../src/auth/tokens.js';
import { loadConfig } from '../../src/config.js';
import { openDatabase } from '../../src/db/database.js';
import { migrate } from '../../src/db/migrator.js';
import { seed } from '../../src/dev/demo-data.js';
import { createApp } from '../../src/http/app.js';
import { buildDependencies } from '../../src/dependencies.js';
import { createHttpServer } from '../../src/http/server.js';
import { createLogger } from '../../src/logger.js';

/*
 * What a request costs the garbage collector, by scenario: the collections while it is measured
 * (minor and major, their time a request), the process's CPU a request, and the bytes allocated a
 * request by where they were allocated (V8's sampling heap profiler, keeping the objects that
 * collections freed). The requests come from many distinct users, from a child process, so that the client's
 * allocations do not count. The server runs in this process on the embedded database (whose
 * engine runs on a thread of its own, outside this heap). Prints figures, asserts nothing.
 *
 *   npm run bench:alloc -- [--users 2000] [--rounds 3] [--connections 20] [--only "a|b"]
 *     [--detail <text>: functions in the places whose name contains it]
 *     [--reference: no compiled documents] [--survivors: what is still held midway through]
 *     [--interval <bytes between samples, 1024>]
 *
 * The script runs it with `npm start`'s 8 MB semi-spaces (what decides how much survives a minor
 * collection) and a larger old generation, for the seeding and the profiler.
 */

const { values: args } = parseArgs({
  options: {
    users: { type: 'string', default: '2000' },
    rounds: { type: 'string', default: '3' },
    /** Also the functions allocating most in the places whose name contains this text. */
    detail: { type: 'string' },
    only: { type: 'string' },
    interval: { type: 'string', default: '1024' },
    connections: { type: 'string', default: '20' },
    /** Count only what was not collected by the end (what survived to the old generation, mostly). */
    survivors: { type: 'boolean', default: false },
    /** Never compile documents: every query on the reference executor. */
    reference: { type: 'boolean', default: false },
  },
});
const users = Number(args.users);
const rounds = Number(args.rounds);

const CHILD_FIELDS =
  'userID username email publicKey accountType parentAccount accountStatus emailVerified createdAt updatedAt lastLogin organizationName domainRestrictionEnabled emailVerificationRequired authProvider lastLoginProvider providerAId childSignupCount signInCount emailConfirmationCount providerAAuthCount providerBAuthCount providerCAuthCount providerDAuthCount lastPasswordChanged loginAttempts lastLoginAttempt lockedUntil lastResetPasswordRequestAt';
const CLIENT_ACCEPT = 'application/graphql-response+json, application/json;q=0.9';

type Scenario = { name: string; method: 'GET' | 'POST'; path: string; headers: Record<string, string>; body?: string };
const scenarios: Scenario[] = [
  { name: 'healthz', method: 'GET', path: '/healthz', headers: {} },
  { name: 'REST profile', method: 'GET', path: '/auth/user-profile', headers: {} },
  {
    name: 'GraphQL me',
    method: 'POST',
    path: '/graphql',
    headers: { 'content-type': 'application/json', accept: CLIENT_ACCEPT },
    body: JSON.stringify({ query: `{ me { ${CHILD_FIELDS} } }` }),
  },
  { name: 'REST organization', method: 'GET', path: '/auth/organization-details', headers: {} },
  ...[
    [
      'GraphQL organization',
      '{ organization { organizationName organizationUrl authUrls { signin signup verify reset update resend successful } domainRestrictionEnabled emailVerificationRequired providerASsoConfig { enabled clientId } credentials { publicKey jwtSecret } } }',
    ],
    ['GraphQL me, one field', '{ me { userID } }'],
    ['GraphQL __typename', '{ __typename }'],
  ].map(([name, query]): Scenario => ({
    name: name!,
    method: 'POST',
    path: '/graphql',
    headers: { 'content-type': 'application/json', accept: CLIENT_ACCEPT },
    body: JSON.stringify({ query }),
  })),
];

/** The client: each request with the next user's token, `connections` at a time, as a child process. */
const CLIENT = `
const http = require('node:http');
let input = '';
process.stdin.on('data', (chunk) => (input += chunk));
process.stdin.on('end', () => {
const { url, tokens, scenario, rounds, connections } = JSON.parse(input);
const agent = new http.Agent({ keepAlive: true, maxSockets: connections });
let next = 0;
const total = tokens.length * rounds;
function one() {
  if (next >= total) return Promise.resolve();
  const token = tokens[next++ % tokens.length];
  return new Promise((resolve, reject) => {
    const request = http.request(url + scenario.path, { method: scenario.method, agent, headers: { ...scenario.headers, authorization: 'Bearer ' + token } }, (response) => {
      if (response.statusCode !== 200) reject(new Error('status ' + response.statusCode));
      response.resume();
      response.on('end', resolve);
    });
    request.on('error', reject);
    request.end(scenario.body);
  }).then(one);
}
Promise.all(Array.from({ length: connections }, one)).then(() => agent.destroy(), (error) => { console.error(error); process.exit(1); });
});
`;

function drive(url: string, tokens: string[], scenario: Scenario, times: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const client = spawn(process.execPath, ['-e', CLIENT], { stdio: ['pipe', 'inherit', 'inherit'] });
    client.stdin.end(JSON.stringify({ url, tokens, scenario, rounds: times, connections: Number(args.connections) }));
    client.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`client exited ${code}`))));
  });
}

type SamplingNode = { callFrame: { functionName: string; url: string }; selfSize: number; children: SamplingNode[] };

/** Where allocations are charged: the innermost frame of ours or of a library, by file. */
function placeOf(frame: SamplingNode['callFrame']): string | undefined {
  const url = frame.url;
  const library = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url)?.[1];
  if (library) return library;
  const own = /\/(src\/.+)$/.exec(url)?.[1];
  if (own) return own;
  if (url.startsWith('node:')) return url;
  return undefined;
}

function byPlace(root: SamplingNode, detail?: string): Map<string, number> {
  const totals = new Map<string, number>();
  const walk = (node: SamplingNode, place: string) => {
    const own = placeOf(node.callFrame);
    let here = own ?? place;
    if (detail && own && own.includes(detail))
      here = `${own}:${node.callFrame.functionName || '(anonymous)'}:${(node.callFrame as { lineNumber?: number }).lineNumber! + 1}`;
    if (node.selfSize) totals.set(here, (totals.get(here) ?? 0) + node.selfSize);
    for (const child of node.children) walk(child, here);
  };
  walk(root, '(V8 and native)');
  return totals;
}

const database = await openDatabase({ memory: true });
await migrate(database.sql);
const [organization] = await seed(database, {
  organizations: 1,
  childrenPerOrganization: Math.ceil(users * 1.3),
  seed: 1,
  now: new Date(),
});
const org = await database.prisma.organization.findUniqueOrThrow({ where: { parentId: organization!.parent.userID } });
const children = await database.prisma.account.findMany({
  where: { parentId: org.parentId, status: 'active' },
  select: { id: true },
  take: users,
});
const tokens = await Promise.all(
  children.map(({ id }) =>
    mintAccessToken({ secret: org.jwtSecret, kid: organization!.parent.publicKey, subject: id, ttlSeconds: 3600 }),
  ),
);
const config = loadConfig({
  ...process.env,
  NODE_ENV: 'production',
  MEMORY_BUDGET_MB: '8192',
  LOG_LEVEL: 'warn',
  RATE_LIMIT_PER_ADDRESS: '0',
  RATE_LIMIT_PER_CREDENTIAL: '0',
});
const app = createApp(
  buildDependencies({
    config,
    database,
    logger: createLogger(config.logLevel, { format: config.logFormat }),
    ...(args.reference ? { compileAfter: Number.MAX_SAFE_INTEGER } : {}),
  }),
);
const server = createHttpServer(config.limits, (request, response) => app.handle(request, response));
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
const session = new Session();
session.connect();

/** Collections while a scenario is measured: their count and time, minor and major. */
const collections = { minor: { count: 0, ms: 0 }, major: { count: 0, ms: 0 } };
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) {
    const kind =
      ((entry as { detail?: unknown }).detail as { kind?: number } | undefined)?.kind ===
      constants.NODE_PERFORMANCE_GC_MINOR
        ? collections.minor
        : collections.major;
    kind.count += 1;
    kind.ms += entry.duration;
  }
}).observe({ entryTypes: ['gc'] });

console.log(`${tokens.length} users, ${rounds} rounds each`);
const chosen = args.only
  ? args.only
      .split('|')
      .flatMap((text) => scenarios.filter((s) => s.name === text || s.name.includes(text)).slice(0, 1))
  : scenarios;
for (const scenario of chosen) {
  // Warm: every user once (the entity cache holds them, the documents are compiled).
  await drive(url, tokens, scenario, 1);
  for (const kind of Object.values(collections)) Object.assign(kind, { count: 0, ms: 0 });
  const cpu = process.cpuUsage();
  const started = performance.now();
  await session.post('HeapProfiler.startSampling', {
    samplingInterval: Number(args.interval),
    includeObjectsCollectedByMajorGC: !args.survivors,
    includeObjectsCollectedByMinorGC: !args.survivors,
  } as never);
  const driven = drive(url, tokens, scenario, rounds);
  // Survivors: what is still held midway through the load (in flight, kept, or promoted and not yet collected).
  if (args.survivors) await new Promise((resolve) => setTimeout(resolve, 4000));
  else await driven;
  const { profile } = (await session.post('HeapProfiler.stopSampling')) as unknown as {
    profile: { head: SamplingNode };
  };
  await driven;
  const requests = tokens.length * rounds;
  const used = process.cpuUsage(cpu);
  console.log(
    `\n${scenario.name}: ${Math.round((used.user + used.system) / requests)} µs CPU a request (this process, with the embedded database's thread), ${Math.round((requests * 1000) / (performance.now() - started))} requests/s`,
  );
  const { minor, major } = collections;
  console.log(
    `  collections: ${minor.count} minor (${Math.round((minor.ms * 1000) / requests)} µs a request), ${major.count} major or incremental (${Math.round((major.ms * 1000) / requests)} µs a request)`,
  );
  const places = [...byPlace(profile.head, args.detail).entries()].sort((a, b) => b[1] - a[1]);
  const total = places.reduce((sum, [, bytes]) => sum + bytes, 0);
  console.log(`  ${Math.round(total / requests).toLocaleString('en')} bytes allocated a request`);
  for (const [place, bytes] of places.slice(0, args.detail ? 45 : 18))
    console.log(`  ${String(Math.round(bytes / requests)).padStart(7)}  ${place}`);
}
session.disconnect();
await new Promise<void>((resolve) => server.close(() => resolve()));
await app.close();
await database.close();
