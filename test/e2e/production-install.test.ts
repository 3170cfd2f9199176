import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../../src/db/database.js';
import { createEmptyDatabase, testMode } from '../helpers/database.js';
import { expectOneLine, listening, root, run } from '../helpers/processes.js';

/**
 * A production deployment: the repository's files and the build (`npm run build`, with the
 * development dependencies), then `npm ci --omit=dev`, then `node dist/main.js` with
 * NODE_ENV=production on an empty database. Nothing of the development tooling is installed,
 * and no demo data may appear. Installing takes a while, so this runs in the PostgreSQL pass
 * only, where it covers both an empty PostgreSQL database and an empty embedded folder.
 */
describe.skipIf(testMode !== 'postgres')('a production install (npm ci --omit=dev) on an empty database', () => {
  let app: string;
  const migrations = readdirSync(path.join(root, 'prisma', 'migrations'), { withFileTypes: true }).filter((entry) =>
    entry.isDirectory(),
  ).length;

  beforeAll(async () => {
    app = mkdtempSync(path.join(tmpdir(), 'production-'));
    const tracked = execFileSync('git', ['ls-files', '-z'], { cwd: root, encoding: 'utf8' })
      .split('\0')
      .filter(Boolean);
    for (const file of tracked) {
      if (!existsSync(path.join(root, file))) continue;
      mkdirSync(path.dirname(path.join(app, file)), { recursive: true });
      cpSync(path.join(root, file), path.join(app, file));
    }
    // The build as `npm run build` makes it (the generated client is compiled with the rest).
    execFileSync(
      process.execPath,
      [
        path.join(root, 'node_modules', 'typescript', 'bin', 'tsc'),
        '-p',
        'tsconfig.json',
        '--outDir',
        path.join(app, 'dist'),
      ],
      {
        cwd: root,
        stdio: 'pipe',
      },
    );
    execFileSync('npm', ['ci', '--omit=dev', '--no-audit', '--no-fund'], { cwd: app, stdio: 'pipe', timeout: 600_000 });
  }, 900_000);
  afterAll(() => {
    if (app) rmSync(app, { recursive: true, force: true });
  });

  const env = (extra: NodeJS.ProcessEnv): NodeJS.ProcessEnv => {
    const clean: NodeJS.ProcessEnv = {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      NODE_ENV: 'production',
      HOST: '127.0.0.1',
      PORT: '0',
      LOG_LEVEL: 'info',
    };
    return { ...clean, ...extra };
  };

  // (typescript and the prisma CLI do come: @prisma/client declares them as peers, which npm installs.)
  it('installs none of the development tooling', () => {
    for (const tool of [
      '@faker-js/faker',
      'tsx',
      'vitest',
      'fast-check',
      'autocannon',
      'prisma-v6',
      'pglite-prisma-adapter',
      'pino-pretty',
      '@readme/openapi-parser',
    ]) {
      expect(existsSync(path.join(app, 'node_modules', tool)), tool).toBe(false);
    }
  });

  it.each(['PostgreSQL', 'embedded'] as const)(
    '%s: starts, migrates, seeds nothing, answers, and stops with status 0',
    async (kind) => {
      const empty = kind === 'PostgreSQL' ? await createEmptyDatabase() : undefined;
      const dataDir = path.join(app, `data-${kind}`);
      const server = run('dist/main.js', env(empty ? { DATABASE_URL: empty.url } : { DATA_DIR: dataDir }), [], {
        cwd: app,
      });
      try {
        const base = await listening(server);
        const health = await fetch(`${base}/health`);
        expect(health.status).toBe(200);
        expect(await health.json()).toMatchObject({
          status: 'ok',
          database: kind === 'PostgreSQL' ? 'postgres' : 'pglite',
        });
        const refused = await fetch(`${base}/auth/user-profile`, { headers: { authorization: 'Bearer not-a-token' } });
        expect(refused.status).toBe(401);
        // What the platform and the callers reach for, with the production dependencies alone.
        expect((await fetch(`${base}/healthz`)).status).toBe(200);
        const ready = await fetch(`${base}/readyz`);
        expect(await ready.json()).toEqual({ status: 'ready' });
        const metrics = await fetch(`${base}/metrics`);
        expect(metrics.status).toBe(200);
        const exposition = await metrics.text();
        expect(exposition).toMatch(
          /^api_http_requests_total\{route="\/auth\/user-profile",method="GET",status="401",code="UNAUTHORIZED"\} 1$/m,
        );
        expect(exposition).toMatch(/^process_resident_memory_bytes /m);
        expect((await (await fetch(`${base}/openapi.json`)).json()).openapi).toBe('3.1.0');
        for (const page of ['/docs', '/docs/swagger-ui-bundle.js'])
          expect((await fetch(`${base}${page}`)).status, page).toBe(200);
        server.child.kill('SIGTERM');
        expect((await server.exited).code, server.output()).toBe(0);
        // Everything it printed, start to stop: no demo, no token.
        expect(server.output()).not.toMatch(/demo|token/i);
        // Its log: JSON lines (no pretty-printer in production), one per answer.
        const requests = server
          .output()
          .split('\n')
          .filter((line) => line.includes('"message":"request"'));
        expect(requests.length).toBeGreaterThanOrEqual(6);
        expect(requests.map((line) => JSON.parse(line))).toContainEqual(
          expect.objectContaining({ level: 'info', route: '/metrics', status: 200 }),
        );
        // What the empty database holds now: every migration, and no organization.
        const database = empty ?? (await openDatabase({ dataDir }));
        try {
          expect(await database.prisma.organization.count()).toBe(0);
          expect(await database.prisma.account.count()).toBe(0);
          const applied = await database.sql.query<{ n: number }>(
            `SELECT count(*)::int AS n FROM "_prisma_migrations" WHERE finished_at IS NOT NULL`,
          );
          expect(applied[0]!.n).toBe(migrations);
        } finally {
          await database.close();
        }
      } finally {
        server.child.kill('SIGKILL');
      }
    },
  );

  it('a demo asked for explicitly, without the development dependencies: exit 1 with one line saying so', async () => {
    const server = run('dist/main.js', env({ DATA_DIR: path.join(app, 'data-demo'), SEED_DEMO_ON_START: 'true' }), [], {
      cwd: app,
    });
    try {
      const { code } = await server.exited;
      expect(code).toBe(1);
      expectOneLine(
        server.output().replace(/^migrations applied: .*\n/m, ''),
        /SEED_DEMO_ON_START needs the development dependencies/,
      );
    } finally {
      server.child.kill('SIGKILL');
    }
  });
});
