import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { decodeProtectedHeader, jwtVerify } from 'jose';
import { describe, expect, it } from 'vitest';
import { secretKey } from '../../src/domain/signing-keys.js';
import { createTestDatabase, testMode } from '../helpers/database.js';
import { baseEnv, listening, root, run as start } from '../helpers/processes.js';

/* The commands behind the npm scripts, run as an operator runs them: from the build (dist/). */

const run = promisify(execFile);

describe('every command explains itself with --help', () => {
  const commands: [string, string][] = [
    ['db:migrate', 'usage: npm run db:migrate'],
    ['db:seed', 'usage: npm run db:seed'],
    ['token', 'usage: npm run token'],
    ['config', 'usage: npm run config'],
    ['schema:print', 'usage: npm run schema:print'],
    ['db:diff', 'usage: npm run db:diff'],
  ];
  // As an operator runs them (npm run), from the build: the first builds if a source changed.
  it.each(commands)(
    'npm run %s -- --help prints its usage and exits 0, touching nothing',
    async (command, usage) => {
      // No database is reachable: a command that tried to open one would fail instead.
      const env = { ...process.env, DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none', DATA_DIR: '/nonexistent' };
      const { stdout } = await run('npm', ['run', '-s', command, '--', '--help'], { cwd: root, env, timeout: 180_000 });
      expect(stdout.startsWith(usage), stdout).toBe(true);
      expect(stdout.split('\n').length).toBeGreaterThan(2);
    },
    200_000,
  );

  it('the built commands run from dist/, not from the TypeScript sources', async () => {
    const scripts = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')).scripts as Record<string, string>;
    for (const command of ['db:migrate', 'db:seed', 'token', 'config', 'schema:print']) {
      expect(scripts[command], command).toMatch(/^node src\/cli\/ensure-built\.mjs && node dist\/cli\/[a-z-]+\.js$/);
    }
    // Current after the calls above: nothing is built again.
    const { stderr } = await run(process.execPath, [path.join(root, 'src/cli/ensure-built.mjs')], { cwd: root });
    expect(stderr).toBe('');
  });
});

describe(`the seed and token commands (${testMode})`, () => {
  it('seed --json prints the organizations; token prints a JWT that verifies', async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'cli-data-'));
    const ownDatabase = testMode === 'postgres' ? await createTestDatabase() : undefined;
    const env = {
      ...process.env,
      ...(ownDatabase ? { DATABASE_URL: ownDatabase.url } : { DATA_DIR: dataDir }),
    };
    delete (env as Record<string, unknown>)[ownDatabase ? 'DATA_DIR' : 'DATABASE_URL'];
    try {
      const seeded = await run(
        process.execPath,
        ['dist/cli/seed.js', '--orgs', '2', '--children', '5', '--seed', '5', '--json'],
        {
          cwd: root,
          env,
        },
      );
      const summary = JSON.parse(seeded.stdout) as {
        organizations: {
          parent: { userID: string; email: string; publicKey: string };
          children: number;
          alertLevel: string;
        }[];
      };
      expect(summary.organizations).toHaveLength(2);
      expect(summary.organizations.map((o) => o.alertLevel)).toEqual(['healthy', 'low']);
      const parent = summary.organizations[1]!.parent;
      const minted = await run(process.execPath, ['dist/cli/token.js', parent.email, '--ttl', '2h'], {
        cwd: root,
        env,
      });
      const token = minted.stdout.trim();
      expect(decodeProtectedHeader(token).kid).toBe(parent.publicKey);

      const check = ownDatabase ?? (await import('../../src/db/database.js')).openDatabase({ dataDir });
      const db = await check;
      try {
        const org = await db.prisma.organization.findUniqueOrThrow({ where: { parentId: parent.userID } });
        const { payload } = await jwtVerify(token, secretKey(org.jwtSecret), { algorithms: ['HS256'] });
        expect(payload.sub).toBe(parent.userID);
        expect(payload.exp! - payload.iat!).toBe(7200);
      } finally {
        if (!ownDatabase) await db.close();
      }

      const unknown = await run(process.execPath, ['dist/cli/token.js', 'nobody@example.org'], {
        cwd: root,
        env,
      }).catch((e) => e);
      expect(unknown.code).toBe(1);
      expect(unknown.stderr).toMatch(/no account with userID or email "nobody@example.org"/);

      // The demo accounts, listed: each parent's email, userID, key and alert level, and a child.
      const listed = (await run(process.execPath, ['dist/cli/token.js', '--list'], { cwd: root, env })).stdout;
      for (const org of summary.organizations) {
        expect(listed).toContain(`(${org.alertLevel})`);
        expect(listed).toContain(
          `parent ${org.parent.email}  ${org.parent.userID}  public key ${org.parent.publicKey}`,
        );
      }
      expect(listed.match(/^ {2}child {2}\S+@/gm)).toHaveLength(2);
      const help = await run(process.execPath, ['dist/cli/token.js', '--help'], { cwd: root, env });
      expect(help.stdout).toMatch(/^usage: npm run token -- <userID\|email>/);
      expect(help.stdout).toContain('--list');
    } finally {
      await ownDatabase?.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe('token beside a server running on the embedded database', () => {
  it("lists and mints through the server's database while it serves; commands that write are still refused", async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'cli-beside-'));
    const server = start(
      'dist/main.js',
      baseEnv({ DATA_DIR: dataDir, SEED_DEMO_ON_START: 'true', NODE_ENV: 'development' }),
    );
    try {
      const base = await listening(server);
      const env = baseEnv({ DATA_DIR: dataDir });
      const first = /^ {2}parent (\S+@\S+) {2}(USR_\S+)/m;
      // Requests in flight while the command reads.
      let serving = true;
      const answered: number[] = [];
      const others: string[] = [];
      const traffic = (async () => {
        while (serving) {
          const response = await fetch(`${base}/auth/organization-details`, { headers: { 'x-public-key': 'APK_x_1' } });
          answered.push(response.status);
          if (response.status !== 404) others.push(`${response.status} ${await response.text()}`);
          else await response.arrayBuffer();
        }
      })();
      const listed = (await run(process.execPath, ['dist/cli/token.js', '--list'], { cwd: root, env })).stdout;
      const [, email, userID] = first.exec(listed) ?? [];
      expect(email, listed).toBeDefined();
      const token = (await run(process.execPath, ['dist/cli/token.js', email!], { cwd: root, env })).stdout.trim();
      serving = false;
      await traffic;
      expect(new Set(answered), `${server.output()}\n${others.slice(0, 5).join('\n')}`).toEqual(new Set([404]));
      const profile = await fetch(`${base}/auth/user-profile`, { headers: { authorization: `Bearer ${token}` } });
      expect(profile.status).toBe(200);
      expect(((await profile.json()) as { data: { user: { userID: string } } }).data.user.userID).toBe(userID);
      expect((await fetch(`${base}/readyz`)).status).toBe(200);
      const seeding = await run(process.execPath, ['dist/cli/seed.js', '--orgs', '1'], { cwd: root, env }).catch(
        (e) => e,
      );
      expect(seeding.code).toBe(1);
      expect(seeding.stderr).toMatch(/is in use by the server/);
    } finally {
      server.child.kill('SIGTERM');
      await server.exited;
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
