import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { decodeProtectedHeader, jwtVerify } from 'jose';
import { describe, expect, it } from 'vitest';
import { mintAccessToken, parseTtl } from '../src/auth/tokens.js';
import { secretKey } from '../src/domain/signing-keys.js';
import { findTokenSubject } from '../src/db/accounts.js';
import { seed } from '../src/dev/demo-data.js';
import { createTestDatabase, testMode, useTestDatabase } from './helpers/database.js';
import { baseEnv, listening, run as start } from './helpers/processes.js';

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, '..');

describe(`token minting (${testMode})`, () => {
  const database = useTestDatabase();

  it("verifies with the organization's secret and not with another organization's", async () => {
    const [orgA, orgB] = await seed(database(), {
      organizations: 2,
      childrenPerOrganization: 3,
      seed: 11,
      now: new Date(),
    });
    const child = await database().prisma.account.findFirstOrThrow({ where: { parentId: orgA!.parent.userID } });
    const found = await findTokenSubject(database().prisma, child.id);
    expect(found.kind).toBe('found');
    if (found.kind !== 'found') return;
    expect(found.kid).toBe(orgA!.parent.publicKey);
    const token = await mintAccessToken({ secret: found.secret, kid: found.kid, subject: child.id, ttlSeconds: 600 });

    const header = decodeProtectedHeader(token);
    expect(header).toMatchObject({ alg: 'HS256', kid: orgA!.parent.publicKey });
    const { payload } = await jwtVerify(token, secretKey(found.secret), { algorithms: ['HS256'] });
    expect(payload.sub).toBe(child.id);
    expect(payload.exp! - payload.iat!).toBe(600);
    expect(Math.abs(payload.iat! - Date.now() / 1000)).toBeLessThan(5);

    const other = await database().prisma.organization.findUniqueOrThrow({ where: { parentId: orgB!.parent.userID } });
    await expect(jwtVerify(token, secretKey(other.jwtSecret), { algorithms: ['HS256'] })).rejects.toThrow(
      /signature verification failed/,
    );
  });

  it('finds accounts by email case-insensitively and says when none matches', async () => {
    const parent = await database().prisma.account.findFirstOrThrow({ where: { type: 'parent' } });
    const found = await findTokenSubject(database().prisma, parent.email.toUpperCase());
    expect(found).toMatchObject({ kind: 'found', userID: parent.id, accountType: 'parent' });
    expect(await findTokenSubject(database().prisma, 'nobody@example.org')).toEqual({ kind: 'none' });
    expect(await findTokenSubject(database().prisma, 'USR_doesnotexist')).toEqual({ kind: 'none' });
  });

  it('parses lifetimes and refuses nonsense', () => {
    expect(parseTtl('90')).toBe(90);
    expect(parseTtl('15m')).toBe(900);
    expect(parseTtl('1h')).toBe(3600);
    expect(parseTtl('7d')).toBe(604800);
    for (const bad of ['', '0', '1w', '-5m', '1.5h', 'soon']) expect(() => parseTtl(bad)).toThrow();
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
      const tsx = path.join(root, 'node_modules', '.bin', 'tsx');
      const seeded = await run(tsx, ['src/cli/seed.ts', '--orgs', '2', '--children', '5', '--seed', '5', '--json'], {
        cwd: root,
        env,
      });
      const summary = JSON.parse(seeded.stdout) as {
        organizations: { parent: { userID: string; email: string; publicKey: string }; children: number; alertLevel: string }[];
      };
      expect(summary.organizations).toHaveLength(2);
      expect(summary.organizations.map((o) => o.alertLevel)).toEqual(['healthy', 'low']);
      const parent = summary.organizations[1]!.parent;
      const minted = await run(tsx, ['src/cli/token.ts', parent.email, '--ttl', '2h'], { cwd: root, env });
      const token = minted.stdout.trim();
      expect(decodeProtectedHeader(token).kid).toBe(parent.publicKey);

      const check = ownDatabase ?? (await import('../src/db/database.js')).openDatabase({ dataDir });
      const db = await check;
      try {
        const org = await db.prisma.organization.findUniqueOrThrow({ where: { parentId: parent.userID } });
        const { payload } = await jwtVerify(token, secretKey(org.jwtSecret), { algorithms: ['HS256'] });
        expect(payload.sub).toBe(parent.userID);
        expect(payload.exp! - payload.iat!).toBe(7200);
      } finally {
        if (!ownDatabase) await db.close();
      }

      const unknown = await run(tsx, ['src/cli/token.ts', 'nobody@example.org'], { cwd: root, env }).catch((e) => e);
      expect(unknown.code).toBe(1);
      expect(unknown.stderr).toMatch(/no account with userID or email "nobody@example.org"/);

      // The demo accounts, listed: each parent's email, userID, key and alert level, and a child.
      const listed = (await run(tsx, ['src/cli/token.ts', '--list'], { cwd: root, env })).stdout;
      for (const org of summary.organizations) {
        expect(listed).toContain(`(${org.alertLevel})`);
        expect(listed).toContain(`parent ${org.parent.email}  ${org.parent.userID}  public key ${org.parent.publicKey}`);
      }
      expect(listed.match(/^ {2}child {2}\S+@/gm)).toHaveLength(2);
      const help = await run(tsx, ['src/cli/token.ts', '--help'], { cwd: root, env });
      expect(help.stdout).toMatch(/^usage: npm run token -- <userID\|email>/);
      expect(help.stdout).toContain('--list');
    } finally {
      await ownDatabase?.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe.skipIf(testMode !== 'pglite')('token beside a server running on the embedded database', () => {
  it('lists and mints through the server\'s database while it serves; commands that write are still refused', async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'cli-beside-'));
    const server = start('src/main.ts', baseEnv({ DATA_DIR: dataDir, SEED_DEMO_ON_START: 'true', NODE_ENV: 'development' }));
    try {
      const base = await listening(server);
      const env = baseEnv({ DATA_DIR: dataDir });
      const tsx = path.join(root, 'node_modules', '.bin', 'tsx');
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
      const listed = (await run(tsx, ['src/cli/token.ts', '--list'], { cwd: root, env })).stdout;
      const [, email, userID] = first.exec(listed) ?? [];
      expect(email, listed).toBeDefined();
      const token = (await run(tsx, ['src/cli/token.ts', email!], { cwd: root, env })).stdout.trim();
      serving = false;
      await traffic;
      expect(new Set(answered), `${server.output()}\n${others.slice(0, 5).join('\n')}`).toEqual(new Set([404]));
      const profile = await fetch(`${base}/auth/user-profile`, { headers: { authorization: `Bearer ${token}` } });
      expect(profile.status).toBe(200);
      expect(((await profile.json()) as { data: { user: { userID: string } } }).data.user.userID).toBe(userID);
      expect((await fetch(`${base}/readyz`)).status).toBe(200);
      const seeding = await run(tsx, ['src/cli/seed.ts', '--orgs', '1'], { cwd: root, env }).catch((e) => e);
      expect(seeding.code).toBe(1);
      expect(seeding.stderr).toMatch(/is in use by the server/);
    } finally {
      server.child.kill('SIGTERM');
      await server.exited;
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
