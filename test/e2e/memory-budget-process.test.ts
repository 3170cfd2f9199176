import { execFile } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { mintAccessToken } from '../../src/auth/tokens.js';
import { loadConfig } from '../../src/config.js';
import { openDatabase, type Database } from '../../src/db/database.js';
import { migrate } from '../../src/db/migrator.js';
import { seed } from '../../src/dev/demo-data.js';
import { RATE_LIMIT_KEY_BYTES, STREAM_BYTES, TRACED_STREAM_BYTES } from '../../src/ops/memory-budget.js';
import { metricValue } from '../helpers/app.js';
import { createTestDatabase, testMode, type TestDatabase } from '../helpers/database.js';
import { baseEnv, expectOneLine, listening, root, run, type Run } from '../helpers/processes.js';

/*
 * The memory budget on a real server, started as `npm start` starts it (the build, V8's heap
 * limit from the budget), at a small budget, pushed past every share at once: more live streams
 * than its share holds, more distinct callers than its entity cache and its rate limiter's store
 * hold, and GraphQL answers for each of them. It answers or refuses each one in the documented
 * way, and it does not die.
 */

const BUDGET_MB = '150';
/** The address of the test's sender `n`, as the trusted proxy (loopback) reports it. */
const from = (n: number) => ({ 'x-forwarded-for': `10.3.${n >> 8}.${n & 255}` });
const ORGANIZATIONS = 16;
const CHILDREN = 300;
/** What the seeded accounts' states answer besides 200: locked, inactive or deleted accounts, depleted credits. */
const ACCOUNT_REFUSALS = new Set([
  'ACCOUNT_INACTIVE',
  'ACCOUNT_LOCKED',
  'ACCOUNT_DELETED',
  'CREDITS_DEPLETED',
  'FORBIDDEN',
]);

type Caller = { token: string; parent: boolean; active: boolean };

/** Seeds the organizations; returns a token for each of their accounts. */
async function seedCallers(database: Pick<Database, 'prisma' | 'sql'>): Promise<Caller[]> {
  const organizations = await seed(database, {
    organizations: ORGANIZATIONS,
    childrenPerOrganization: CHILDREN,
    seed: 5,
    now: new Date(),
  });
  const callers: Caller[] = [];
  for (const organization of organizations) {
    const { jwtSecret } = await database.prisma.organization.findUniqueOrThrow({
      where: { parentId: organization.parent.userID },
    });
    const accounts = await database.sql.query<{ id: string; type: string; status: string }>(
      'SELECT id, type, status FROM "Account" WHERE id = $1 OR "parentId" = $1',
      [organization.parent.userID],
    );
    for (const account of accounts) {
      const token = await mintAccessToken({
        secret: jwtSecret,
        kid: organization.parent.publicKey,
        subject: account.id,
        ttlSeconds: 3600,
      });
      callers.push({ token, parent: account.type === 'parent', active: account.status === 'active' });
    }
  }
  return callers;
}

/** How each answer ended: its status and code, or how the connection failed. */
function outcome(status: number, body: string): string {
  const code = /"code":"([A-Z_]+)"/.exec(body)?.[1];
  if (status === 200 && code === undefined) return '200';
  return `${status} ${code ?? '(no code)'}`;
}

describe(`the memory budget on a real server (${testMode})`, () => {
  const folders: string[] = [];
  const databases: TestDatabase[] = [];
  afterAll(async () => {
    for (const database of databases) await database.close();
    for (const folder of folders) rmSync(folder, { recursive: true, force: true });
  });

  it(`at MEMORY_BUDGET_MB=${BUDGET_MB}, streams and callers past their shares are refused or evicted, and the process lives`, async () => {
    // The data, written before the server starts (PGlite: its folder; PostgreSQL: a database of its own).
    let where: NodeJS.ProcessEnv;
    let callers: Caller[];
    if (testMode === 'postgres') {
      const database = await createTestDatabase();
      databases.push(database);
      callers = await seedCallers(database);
      where = { DATABASE_URL: database.url };
    } else {
      const dataDir = mkdtempSync(path.join(tmpdir(), 'budget-'));
      folders.push(dataDir);
      const database = await openDatabase({ dataDir });
      await migrate(database.sql);
      callers = await seedCallers(database);
      await database.close();
      where = { DATA_DIR: dataDir };
    }
    const env = baseEnv({
      ...where,
      NODE_ENV: 'production',
      MEMORY_BUDGET_MB: BUDGET_MB,
      // The cache's records take 14 % of a budget by default, about 50,000 users at this one:
      // more callers than a test makes. An explicit bound puts the cache past it too, and leaves
      // the heap a budget this small has without records.
      CACHE_MAX_BYTES: String(2 * 1024 * 1024),
      RATE_LIMIT_PER_CREDENTIAL: '100000',
      // Each of the test's concurrent senders is a client of its own (X-Forwarded-For): one
      // client holds a quarter of the requests in progress at most.
      TRUST_PROXY: 'loopback',
      LIVE_MAX_PER_CREDENTIAL: '1000',
      LIVE_MAX_PER_ORGANIZATION: '1000',
    });
    const { memory } = loadConfig(env, { containerLimitBytes: undefined, heapLimitBytes: Number.MAX_SAFE_INTEGER });
    expect(callers.length).toBeGreaterThan(memory.rateLimitKeys);
    // As `npm start` runs it: the build, with V8's old space from the budget.
    const server: Run = run('dist/main.js', env, [], {
      nodeArgs: ['--max-semi-space-size=8', `--max-old-space-size=${memory.oldSpaceMiB}`],
    });
    const alive = () => server.child.exitCode === null && server.child.signalCode === null;
    try {
      const url = await listening(server);
      const outcomes = new Map<string, number>();
      const count = (key: string) => outcomes.set(key, (outcomes.get(key) ?? 0) + 1);

      // More streams than the share holds, 25 opening at a time: each one opens, or is refused as documented.
      const streams: AbortController[] = [];
      const streamOutcomes = new Map<string, number>();
      const subscribe = async (caller: Caller, sender: number) => {
        const controller = new AbortController();
        streams.push(controller);
        const answer = await fetch(`${url}/graphql`, {
          method: 'POST',
          signal: controller.signal,
          headers: {
            authorization: `Bearer ${caller.token}`,
            'content-type': 'application/json',
            accept: 'text/event-stream',
            ...from(sender),
          },
          body: JSON.stringify({ query: 'subscription { organizationChanged { organizationName } }' }),
        });
        const reader = answer.body!.getReader();
        let text = '';
        while (!/event: next\ndata: .*\n\n/.test(text)) {
          const { value, done } = await reader.read();
          if (done) break;
          text += new TextDecoder().decode(value);
        }
        const key =
          answer.status !== 200
            ? `${answer.status}`
            : (/"code":"([A-Z_]+)"/.exec(text)?.[1] ??
              (text.includes('organizationName') ? 'open' : text.slice(0, 200)));
        streamOutcomes.set(key, (streamOutcomes.get(key) ?? 0) + 1);
      };
      const subscribers = callers.filter((caller) => caller.active).slice(0, memory.maxStreams + 60);
      for (let i = 0; i < subscribers.length; i += 25)
        await Promise.all(subscribers.slice(i, i + 25).map((caller, sender) => subscribe(caller, sender)));
      expect(alive()).toBe(true);
      expect(streamOutcomes.get('TOO_MANY_SUBSCRIPTIONS'), JSON.stringify([...streamOutcomes])).toBeGreaterThanOrEqual(
        50,
      );
      expect(streamOutcomes.get('open')).toBeLessThanOrEqual(memory.maxStreams);
      for (const key of streamOutcomes.keys())
        expect(['open', 'TOO_MANY_SUBSCRIPTIONS', 'SERVICE_UNAVAILABLE', ...ACCOUNT_REFUSALS]).toContain(key);

      // Every caller, 64 at a time: its profile (REST), and its GraphQL answer twice; a parent its
      // child list. More than the entity cache and the rate limiter's store hold.
      const GRAPHQL = '{ me { id email } organization { organizationName } }';
      const CHILD_LIST = '{ childAccounts(limit: 50) { stats { total } edges { node { id email } } } }';
      const work = callers.flatMap((caller) => [
        (sender: number) =>
          fetch(`${url}/auth/user-profile`, { headers: { authorization: `Bearer ${caller.token}`, ...from(sender) } }),
        ...[0, 1].map(
          () => (sender: number) =>
            fetch(`${url}/graphql`, {
              method: 'POST',
              headers: { authorization: `Bearer ${caller.token}`, 'content-type': 'application/json', ...from(sender) },
              body: JSON.stringify({ query: caller.parent ? CHILD_LIST : GRAPHQL }),
            }),
        ),
      ]);
      let next = 0;
      await Promise.all(
        Array.from({ length: 64 }, async (_, sender) => {
          while (next < work.length) {
            const answer = await work[next++]!(sender).catch((error: Error) => error);
            if (answer instanceof Error) count(`failed: ${answer.message}`);
            else {
              const key = outcome(answer.status, await answer.text());
              count(key);
              if (answer.status === 503) expect(answer.headers.get('retry-after')).toMatch(/^\d+$/);
            }
          }
        }),
      );
      const seen = JSON.stringify([...outcomes]);
      expect(alive(), server.output()).toBe(true);
      // An account's state is refused 403 on REST and in GraphQL's error list (200).
      const documented = [
        '200',
        '503 SERVICE_UNAVAILABLE',
        ...[...ACCOUNT_REFUSALS].flatMap((code) => [`403 ${code}`, `200 ${code}`]),
      ];
      for (const key of outcomes.keys()) expect(documented, seen).toContain(key);
      expect(outcomes.get('200') ?? 0, seen).toBeGreaterThan(work.length / 2);

      // Each structure within its share, the entity cache filled to it; still ready.
      const metrics = await (await fetch(`${url}/metrics`)).text();
      const gauge = (name: string) => metricValue(metrics, name);
      for (const share of ['entityCache', 'rateLimiter'] as const) {
        expect(gauge(`api_memory_share_used_bytes{share="${share}"}`), share).toBeLessThanOrEqual(memory.shares[share]);
      }
      expect(gauge('api_memory_share_used_bytes{share="entityCache"}')).toBeGreaterThan(memory.shares.entityCache / 2);
      // Its keys are split between the two limits; the one per credential is on, and full.
      expect(gauge('api_memory_share_used_bytes{share="rateLimiter"}')).toBe(
        Math.ceil(memory.rateLimitKeys / 2) * RATE_LIMIT_KEY_BYTES,
      );
      expect((await fetch(`${url}/healthz`)).status).toBe(200);

      // As many requests in progress as the working reserve holds (their bodies still arriving):
      // one more is refused 503 at once, and answered again once they are gone.
      const { port } = new URL(url);
      const held = await Promise.all(
        Array.from({ length: memory.maxRequests }, async (_, sender) => {
          const socket = connect(Number(port), '127.0.0.1');
          await once(socket, 'connect');
          socket.write(
            `POST /graphql HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: ${from(sender)['x-forwarded-for']}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"query":`,
          );
          return socket;
        }),
      );
      const inProgress = async () =>
        metricValue(await (await fetch(`${url}/metrics`)).text(), 'api_memory_requests_in_progress');
      for (let i = 0; i < 100 && (await inProgress()) < memory.maxRequests; i++)
        await new Promise((resolve) => setTimeout(resolve, 50));
      const busy = await fetch(`${url}/auth/user-profile`, {
        headers: { authorization: `Bearer ${callers[0]!.token}` },
      });
      expect(busy.status).toBe(503);
      expect(busy.headers.get('retry-after')).toBe('1');
      expect(await busy.json()).toMatchObject({
        success: false,
        error: { code: 'SERVICE_UNAVAILABLE', message: expect.stringMatching(/busy/) },
      });
      for (const socket of held) socket.destroy();
      for (let i = 0; i < 100 && (await inProgress()) > 0; i++) await new Promise((resolve) => setTimeout(resolve, 50));
      expect(
        (await fetch(`${url}/auth/user-profile`, { headers: { authorization: `Bearer ${callers[0]!.token}` } })).status,
      ).not.toBe(503);
      for (const controller of streams) controller.abort();
      server.child.kill('SIGTERM');
      expect((await server.exited).code, server.output()).toBe(0);
    } finally {
      if (alive()) server.child.kill('SIGKILL');
    }
  }, 240_000);

  it('a start whose bounds cannot fit the budget fails with one line naming them', async () => {
    const started = run(
      'dist/main.js',
      baseEnv({ MEMORY_BUDGET_MB: '200', CACHE_MAX_BYTES: '100000000', LIVE_MAX_STREAMS: '3000' }),
    );
    const { code } = await started.exited;
    expect(code).toBe(2);
    expectOneLine(
      started.output(),
      /^config: MEMORY_BUDGET_MB: CACHE_MAX_BYTES 95 MiB \(81 MiB of it outside the heap\), LIVE_MAX_STREAMS 3000 \(29 MiB\) need \d+ MiB of heap .* accounts for \d+ MiB of the heap beside 81 MiB of cache records: lower them, or raise MEMORY_BUDGET_MB to at least \d+$/,
    );
    // The least it names is enough.
    const least = /at least (\d+)/.exec(started.output())![1]!;
    expect(() =>
      loadConfig({ MEMORY_BUDGET_MB: least, CACHE_MAX_BYTES: '100000000', LIVE_MAX_STREAMS: '3000' }),
    ).not.toThrow();
    expect(() =>
      loadConfig({
        MEMORY_BUDGET_MB: String(Number(least) - 1),
        CACHE_MAX_BYTES: '100000000',
        LIVE_MAX_STREAMS: '3000',
      }),
    ).toThrow(/lower them/);
  });

  // The figure does not depend on the database (the benchmark opens its own embedded one).
  // Traced, every stream sampled (its server and subscription spans stay open): the figure the budget counts
  // when tracing is on.
  for (const [traced, bound] of [
    [false, STREAM_BYTES],
    [true, TRACED_STREAM_BYTES],
  ] as const) {
    it(`an idle live stream holds at most ${bound / 1024} KiB of heap${traced ? ', traced' : ''}`, async () => {
      const env = { ...process.env };
      for (const name of Object.keys(env)) if (name.startsWith('OTEL_')) delete env[name];
      // Traced: exported nowhere (a closed port), as a collector that is down; each export given
      // up on in half a second, not the exporter's default 10 (the figure waits for the queue to
      // hand every span on, which took a minute otherwise).
      if (traced)
        Object.assign(env, {
          OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9',
          OTEL_EXPORTER_OTLP_TIMEOUT: '500',
          OTEL_BSP_SCHEDULE_DELAY: '100',
        });
      const { stdout, stderr } = await promisify(execFile)(
        process.execPath,
        ['--import', 'tsx', 'test/bench/live.ts', '--streams', '1000', '--organizations', '25', '--heap-only'],
        {
          cwd: root,
          encoding: 'utf8',
          timeout: 240_000,
          env,
        },
      );
      // What the clients said of a stream that failed, if one did.
      const output = `${stdout}${stderr}`;
      const perStream = Number(/heap: (-?\d+) bytes a stream/.exec(output)?.[1]);
      expect(output).toMatch(/open streams: 1,000 /);
      expect(perStream, output).toBeGreaterThan(2_000);
      expect(perStream, output).toBeLessThanOrEqual(bound);
    }, 300_000);
  }
});
