import { createServer as createTcpServer, connect, type Server as TcpServer, type Socket } from 'node:net';
import { describe, expect, it } from 'vitest';
import { openDatabase } from '../src/db/database.js';
import { createOrganization, tokenFor } from './helpers/builders.js';
import { rest, startServer } from './helpers/app.js';
import { testMode, useTestDatabase } from './helpers/database.js';

/** A TCP forwarder that can be cut and restored, standing for a database that goes away and comes back. */
async function startProxy(target: { host: string; port: number }) {
  const sockets = new Set<Socket>();
  let server: TcpServer | undefined;
  let port = 0;
  const listen = () =>
    new Promise<void>((resolve) => {
      server = createTcpServer((client) => {
        const upstream = connect(target.port, target.host);
        sockets.add(client).add(upstream);
        client.pipe(upstream).pipe(client);
        const drop = () => {
          client.destroy();
          upstream.destroy();
        };
        client.on('error', drop).on('close', drop);
        upstream.on('error', drop).on('close', drop);
      });
      server.listen(port, '127.0.0.1', () => {
        port = (server!.address() as { port: number }).port;
        resolve();
      });
    });
  await listen();
  return {
    get port() {
      return port;
    },
    cut: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        sockets.clear();
        server!.close(() => resolve());
      }),
    restore: listen,
  };
}

describe(`faults (${testMode})`, () => {
  const database = useTestDatabase();

  it('10,000 organization-details answers raise the retrieval counter by exactly 10,000', async () => {
    const server = await startServer(database());
    try {
      const org = await createOrganization(database());
      let ok = 0;
      for (let batch = 0; batch < 100; batch++) {
        const results = await Promise.all(
          Array.from({ length: 100 }, () =>
            rest(server, '/auth/organization-details', { publicKey: org.parent.publicKey }),
          ),
        );
        ok += results.filter((r) => r.status === 200).length;
      }
      expect(ok).toBe(10_000);
      await server.app.deps.retrievals.flush();
      const row = await database().prisma.organization.findUniqueOrThrow({ where: { parentId: org.parent.id } });
      expect(row.detailsRetrievalCount).toBe(10_000n);
    } finally {
      await server.close();
    }
  });

  it('a failed counter write keeps its increments for the next flush', async () => {
    const server = await startServer(database());
    try {
      const org = await createOrganization(database());
      const counter = server.app.deps.retrievals;
      const prisma = database().prisma;
      const original = prisma.organization.updateMany;
      prisma.organization.updateMany = (() => Promise.reject(new Error('connection lost'))) as never;
      for (let i = 0; i < 7; i++) counter.record(org.parent.id, new Date());
      await counter.flush();
      expect(counter.unsaved).toBe(7);
      prisma.organization.updateMany = original;
      await counter.flush();
      expect(counter.unsaved).toBe(0);
      const row = await prisma.organization.findUniqueOrThrow({ where: { parentId: org.parent.id } });
      expect(row.detailsRetrievalCount).toBe(7n);
    } finally {
      await server.close();
    }
  });

  it.skipIf(testMode !== 'postgres')(
    'database gone: 503 at once on every path and not ready, the process stays up, and it recovers by itself',
    async () => {
      const url = new URL(database().url!);
      const proxy = await startProxy({ host: url.hostname, port: Number(url.port) });
      const viaProxy = new URL(url);
      viaProxy.port = String(proxy.port);
      const db = await openDatabase({
        url: viaProxy.toString(),
        connectTimeoutMs: 1000,
        statementTimeoutMs: 1500,
        poolSize: 4,
      });
      const server = await startServer(db);
      try {
        const org = await createOrganization(database());
        const token = await tokenFor(org.parent, org);
        expect((await rest(server, '/auth/user-profile', { token })).status).toBe(200);
        await proxy.cut();
        server.app.deps.cache.clear();
        for (const p of [
          '/auth/user-profile',
          '/auth/organization-details',
          '/auth/child-accounts',
          '/parent/credit-analysis',
        ]) {
          const started = Date.now();
          const r = await rest(server, p, { token });
          expect(r.status, p).toBe(503);
          expect(r.body.error.code).toBe('SERVICE_UNAVAILABLE');
          // No hang: the cut proxy refuses at once (a few milliseconds idle); 2 s is far beyond that.
          expect(Date.now() - started).toBeLessThan(2000);
        }
        // Excess requests while it is gone fail fast too, none hangs.
        const burst = await Promise.all(
          Array.from({ length: 40 }, () => rest(server, '/auth/user-profile', { token })),
        );
        expect(burst.every((r) => r.status === 503)).toBe(true);
        // Readiness says so once its kept answer (a second) has passed, liveness does not.
        await expect
          .poll(async () => (await rest(server, '/readyz')).body, { timeout: 15_000, interval: 100 })
          .toEqual({ status: 'unavailable', reason: 'database unavailable' });
        expect((await rest(server, '/healthz')).status).toBe(200);
        await proxy.restore();
        await expect
          .poll(async () => (await rest(server, '/auth/user-profile', { token })).status, {
            timeout: 30_000,
            interval: 100,
          })
          .toBe(200);
        // And back to ready.
        await expect
          .poll(async () => (await rest(server, '/readyz')).status, { timeout: 30_000, interval: 100 })
          .toBe(200);
      } finally {
        await server.close();
        await db.close();
        await proxy.cut().catch(() => {});
      }
    },
  );

  it.skipIf(testMode !== 'postgres')('pool exhausted: excess requests fail fast with 503, none hangs', async () => {
    const db = await openDatabase({ url: database().url!, poolSize: 1, connectTimeoutMs: 300 });
    const server = await startServer(db);
    let release: () => void = () => {};
    const held = db.sql.withConnection(
      () =>
        new Promise<void>((resolve) => {
          release = resolve;
        }),
    );
    try {
      const org = await createOrganization(database());
      const token = await tokenFor(org.parent, org);
      const started = Date.now();
      const results = await Promise.all(
        Array.from({ length: 20 }, () => rest(server, '/auth/user-profile', { token })),
      );
      expect(results.map((r) => r.status)).toEqual(Array(20).fill(503));
      expect(results.every((r) => r.body.error.code === 'SERVICE_UNAVAILABLE')).toBe(true);
      // No hang: each waits for the 300 ms connect timeout (idle: about that); 10x it.
      expect(Date.now() - started).toBeLessThan(3000);
      release();
      await held;
      expect((await rest(server, '/auth/user-profile', { token })).status).toBe(200);
    } finally {
      release();
      await server.close();
      await db.close();
    }
  });
});
