import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rest, startServer, type TestServer } from './helpers/app.js';
import { createChild, createOrganization, tokenFor, type BuiltOrganization } from './helpers/builders.js';
import { testMode, useTestDatabase } from './helpers/database.js';
import { freePort } from './helpers/postgres-cluster.js';
import { baseEnv, listening, run } from './helpers/processes.js';

/*
 * Several instances with CHANGE_RELAY_URL: one reads the replication stream (one slot, one
 * walsender on the primary) and relays the changes to the others; when it goes, another takes over.
 */
describe.runIf(testMode === 'postgres')('one replication stream relayed to every instance (postgres)', () => {
  const database = useTestDatabase();
  const servers: TestServer[] = [];
  const relays: string[] = [];
  let org: BuiltOrganization;
  let childId: string;
  let childToken: string;

  const slots = async () =>
    (await database().sql.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_replication_slots WHERE slot_name LIKE 'api_cache_%' AND database = current_database()`))[0]!.n;
  /** The relay that answers (401 without its token) is the reader's; the others listen on nothing. */
  const reader = async (): Promise<number> => {
    const answering: number[] = [];
    for (const [i, url] of relays.entries()) {
      if (!servers[i]) continue;
      const status = await fetch(`${url}/changes`).then((response) => response.status, () => 0);
      if (status !== 0) {
        expect(status).toBe(401);
        answering.push(i);
      }
    }
    expect(answering).toHaveLength(1);
    return answering[0]!;
  };
  /** Every running server answers the child's profile with `status` within `ms` of now. */
  const allAnswer = async (status: number, ms: number) => {
    const started = performance.now();
    for (const server of servers.filter(Boolean)) {
      for (;;) {
        const answered = (await rest(server, '/auth/user-profile', { token: childToken })).status;
        if (answered === status) break;
        expect(performance.now() - started, `a server still answered ${answered}`).toBeLessThan(ms);
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    }
  };

  beforeAll(async () => {
    org = await createOrganization(database());
    const child = await createChild(database(), org.parent);
    childId = child.id;
    childToken = await tokenFor(child, org);
    for (let i = 0; i < 3; i++) {
      const url = `http://127.0.0.1:${await freePort()}`;
      relays.push(url);
      servers.push(await startServer(database(), { env: { CHANGE_RELAY_URL: url, CHANGE_RELAY_HOST: '127.0.0.1' } }));
    }
  }, 60_000);
  afterAll(async () => {
    for (const server of servers) await server?.close();
  });

  it('one instance holds the only slot; a change from outside reaches all three within 100 ms of its COMMIT', async () => {
    for (const server of servers) await server.app.deps.cache.caughtUp(10_000);
    expect(await slots()).toBe(1);
    await reader();
    const roles = [];
    for (const server of servers) {
      const health = (await rest(server, '/health')).body;
      expect(health).toMatchObject({ cache: 'live', changes: 'logical' });
      roles.push(health.relay);
    }
    expect(roles.sort()).toEqual(['follower', 'follower', 'reader']);
    await allAnswer(200, 1000);
    await database().sql.query(`UPDATE "Account" SET status = 'locked', "lockedUntil" = now() + interval '1 hour' WHERE id = $1`, [childId]);
    await allAnswer(403, 100);
    await database().sql.query(`UPDATE "Account" SET status = 'active', "lockedUntil" = NULL WHERE id = $1`, [childId]);
    await allAnswer(200, 100);
  });

  it('when the reader goes, another takes the stream over; changes reach the others again, one slot held', async () => {
    const gone = await reader();
    await servers[gone]!.close();
    delete servers[gone];
    const started = performance.now();
    for (const server of servers.filter(Boolean)) await server.app.deps.cache.caughtUp(15_000);
    const tookOver = performance.now() - started;
    expect(tookOver).toBeLessThan(15_000);
    await reader();
    expect(await slots()).toBe(1);
    await database().sql.query(`UPDATE "Account" SET status = 'locked', "lockedUntil" = now() + interval '1 hour' WHERE id = $1`, [childId]);
    await allAnswer(403, 100);
  }, 30_000);

  it('a reader killed with SIGKILL: its lock and slot go with its sessions, and the follower reads the stream', async () => {
    for (const [i, server] of servers.entries()) {
      await server?.close();
      delete servers[i];
    }
    const url = `http://127.0.0.1:${await freePort()}`;
    const killed = run('src/main.ts', baseEnv({ DATABASE_URL: database().url!, MIGRATE_ON_START: 'false', CHANGE_RELAY_URL: url, CHANGE_RELAY_HOST: '127.0.0.1' }));
    try {
      await listening(killed);
      await expect.poll(async () => (await fetch(`${url}/changes`).then((r) => r.status, () => 0)), { timeout: 15_000, interval: 100 }).toBe(401);
      const follower = await startServer(database(), { env: { CHANGE_RELAY_URL: `http://127.0.0.1:${await freePort()}`, CHANGE_RELAY_HOST: '127.0.0.1' } });
      servers.push(follower);
      expect((await rest(follower, '/health')).body).toMatchObject({ cache: 'live', relay: 'follower' });
      killed.child.kill('SIGKILL');
      await killed.exited;
      const killedAt = performance.now();
      await expect.poll(async () => (await rest(follower, '/health')).body, { timeout: 10_000, interval: 50 }).toMatchObject({ cache: 'live', relay: 'reader' });
      expect(performance.now() - killedAt).toBeLessThan(5000);
      expect(await slots()).toBe(1);
      await database().sql.query(`UPDATE "Account" SET status = 'active', "lockedUntil" = NULL WHERE id = $1`, [childId]);
      await allAnswer(200, 100);
    } finally {
      killed.child.kill('SIGKILL');
    }
  }, 60_000);
});
