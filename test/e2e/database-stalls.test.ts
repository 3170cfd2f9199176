import pg from 'pg';
import { describe, expect, it, vi } from 'vitest';
import type { ChangeFeed } from '../../src/db/capture/feed.js';
import { LogicalChangeFeed } from '../../src/db/capture/logical.js';
import { COUNT_TRIGGERS_SQL, installTriggers, NotifyChangeFeed } from '../../src/db/capture/triggers.js';
import { openDatabase } from '../../src/db/database.js';
import { migrate, readMigrations, type LocalMigration } from '../../src/db/migrator.js';
import { rest, startServer } from '../helpers/app.js';
import { createOrganization, tokenFor } from '../helpers/builders.js';
import { createEmptyDatabase, testMode, useTestDatabase } from '../helpers/database.js';
import { startStallingProxy } from '../helpers/stalling-proxy.js';

describe.skipIf(testMode !== 'postgres')(`database stalls (${testMode})`, () => {
  const database = useTestDatabase();

  it('a database that stops answering: 503 within the statement timeout plus a margin, and the pool recovers by itself', async () => {
    const url = new URL(database().url!);
    const proxy = await startStallingProxy({ host: url.hostname, port: Number(url.port) });
    const viaProxy = new URL(url);
    viaProxy.port = String(proxy.port);
    const statementTimeoutMs = 1500;
    const db = await openDatabase({
      url: viaProxy.toString(),
      connectTimeoutMs: 1000,
      statementTimeoutMs,
      poolSize: 3,
    });
    const server = await startServer(db);
    try {
      const org = await createOrganization(database());
      const token = await tokenFor(org.parent, org);
      // Every pooled connection opened and warm: the stall catches them holding a connection.
      await Promise.all(Array.from({ length: 3 }, () => rest(server, '/auth/child-accounts', { token })));
      proxy.stall();
      server.app.deps.cache.clear();
      const started = Date.now();
      const answers = await Promise.all(
        ['/auth/child-accounts', '/auth/user-profile', '/parent/credit-analysis', '/auth/child-accounts?search=x'].map(
          (path) => rest(server, path, { token }),
        ),
      );
      const elapsed = Date.now() - started;
      expect(answers.map((a) => a.status)).toEqual([503, 503, 503, 503]);
      expect(answers.every((a) => a.body.error.code === 'SERVICE_UNAVAILABLE')).toBe(true);
      // Answered, not hung: the client's bound (statement timeout + 1 s margin, 2.5 s idle) ends
      // each; the no-hang bound is 10x that.
      expect(elapsed).toBeLessThan((statementTimeoutMs + 1000) * 10);
      proxy.resume();
      let status = 0;
      for (let attempt = 0; attempt < 40 && status !== 200; attempt++) {
        status = (await rest(server, '/auth/child-accounts', { token })).status;
        if (status !== 200) await new Promise((resolve) => setTimeout(resolve, 250));
      }
      expect(status).toBe(200);
    } finally {
      proxy.resume();
      await server.close();
      await db.close();
      await proxy.close();
    }
  });

  type FeedTiming = {
    heartbeatMs: number;
    staleAfterMs?: number;
    heartbeatTimeoutMs: number;
    connectTimeoutMs?: number;
  };
  /** Both sources of changes, and how each one's check is recognised among a connection's queries. */
  const sources = [
    {
      name: 'the replication stream',
      check: (text: string) => text.includes('pg_logical_emit_message'),
      open: (connection: pg.ClientConfig, timing: FeedTiming, onStateChange: (live: boolean) => void): ChangeFeed =>
        new LogicalChangeFeed({ connection, onStateChange, ...timing }),
    },
    {
      name: 'the trigger listener',
      check: (text: string) => text === COUNT_TRIGGERS_SQL,
      open: (connection: pg.ClientConfig, timing: FeedTiming, onStateChange: (live: boolean) => void): ChangeFeed =>
        new NotifyChangeFeed({ connection, onStateChange, install: () => installTriggers(database().sql), ...timing }),
    },
  ];

  /** A change feed whose connections go through a proxy that can stall, with its state changes. */
  async function feedThroughProxy(source: (typeof sources)[number], timing: FeedTiming) {
    const url = new URL(database().url!);
    const proxy = await startStallingProxy({ host: url.hostname, port: Number(url.port) });
    const states: boolean[] = [];
    const connection = {
      host: url.hostname,
      port: proxy.port,
      user: decodeURIComponent(url.username),
      password: decodeURIComponent(url.password),
      database: url.pathname.slice(1),
    };
    const feed = source.open(connection, timing, (live) => states.push(live));
    return { proxy, feed, states };
  }

  for (const source of sources) {
    it(`${source.name} unanswered past staleAfterMs is not live (the cache is bypassed) before its connection is given up`, async () => {
      const { proxy, feed, states } = await feedThroughProxy(source, {
        heartbeatMs: 50,
        staleAfterMs: 300,
        heartbeatTimeoutMs: 30_000,
      });
      try {
        await feed.started();
        expect(feed.live).toBe(true);
        proxy.stall();
        // A socket that looks open proves nothing: without an answered check, not live.
        await expect.poll(() => feed.live, { timeout: 5000, interval: 20 }).toBe(false);
        expect(states).toEqual([true]);
        proxy.resume();
        await expect.poll(() => feed.live, { timeout: 5000, interval: 20 }).toBe(true);
      } finally {
        proxy.resume();
        await feed.close();
        await proxy.close();
      }
    });

    it(`${source.name}'s checks while the database is frozen: one in flight, never queued; the connections replaced past their bound`, async () => {
      // The checks each connection is sent.
      const sent = new Map<pg.Client, number>();
      const original = pg.Client.prototype.query;
      const query = vi.spyOn(pg.Client.prototype, 'query').mockImplementation(function (
        this: pg.Client,
        ...args: unknown[]
      ) {
        const text = typeof args[0] === 'string' ? args[0] : ((args[0] as { text?: string } | undefined)?.text ?? '');
        if (source.check(text)) sent.set(this, (sent.get(this) ?? 0) + 1);
        return (original as (...a: unknown[]) => never).apply(this, args);
      });
      const { proxy, feed, states } = await feedThroughProxy(source, {
        heartbeatMs: 50,
        heartbeatTimeoutMs: 1000,
        connectTimeoutMs: 500,
      });
      try {
        await feed.started();
        expect(feed.live).toBe(true);
        await new Promise((resolve) => setTimeout(resolve, 300));
        const before = new Map(sent);
        proxy.stall();
        await new Promise((resolve) => setTimeout(resolve, 2500));
        // 50 checks would have been sent at one every 50 ms; one is, and it is never answered.
        for (const [client, count] of sent)
          expect(count - (before.get(client) ?? 0), 'checks sent on one connection while frozen').toBeLessThanOrEqual(
            1,
          );
        expect(feed.live).toBe(false);
        expect(states).toEqual([true, false]);
        proxy.resume();
        for (let i = 0; i < 100 && !feed.live; i++) await new Promise((resolve) => setTimeout(resolve, 100));
        expect(feed.live).toBe(true);
      } finally {
        query.mockRestore();
        proxy.resume();
        await feed.close();
        await proxy.close();
      }
    });
  }

  it("a second instance waits for a long migration of the first, past the requests' statement timeout, and both come up", async () => {
    const empty = await createEmptyDatabase();
    const slow: LocalMigration = { name: '99999999999999_slow', checksum: 'slow', script: 'SELECT pg_sleep(4);' };
    const migrations = [...readMigrations(), slow];
    // Both with a 1 s statement timeout, as requests have: the migration and the wait outlast it.
    const first = await openDatabase({ url: empty.url!, statementTimeoutMs: 1000, poolSize: 2 });
    const second = await openDatabase({ url: empty.url!, statementTimeoutMs: 1000, poolSize: 2 });
    try {
      const [a, b] = await Promise.all([
        migrate(first.sql, migrations),
        new Promise((resolve) => setTimeout(resolve, 300)).then(() => migrate(second.sql, migrations)),
      ]);
      expect([...a.applied, ...b.applied].sort()).toEqual(migrations.map((m) => m.name).sort());
      expect(a.applied.length === 0 || b.applied.length === 0).toBe(true);
      // A wait longer than its own bound is a readable failure, not a hang.
      const holder = await openDatabase({ url: empty.url!, poolSize: 1 });
      try {
        await holder.sql.withConnection(async (connection) => {
          await connection.query('SELECT pg_advisory_lock(72707369)');
          await expect(migrate(second.sql, migrations, { lockTimeoutMs: 1000 })).rejects.toThrow(
            /MIGRATION_LOCK_TIMEOUT_MS/,
          );
          await connection.query('SELECT pg_advisory_unlock(72707369)');
        });
      } finally {
        await holder.close();
      }
    } finally {
      await first.close();
      await second.close();
      await empty.close();
    }
  });
});
