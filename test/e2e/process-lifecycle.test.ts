import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { connect, createServer as createTcpServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../../src/db/database.js';
import { createTestDatabase, testMode, type TestDatabase } from '../helpers/database.js';
import { metricValue } from '../helpers/app.js';
import { baseEnv, expectOneLine, listening, printed, run } from '../helpers/processes.js';

/**
 * Requests in flight when SIGTERM arrives, from one client with one credential: as many as the
 * default memory budget lets one client have in progress at once, nearly (a quarter of 176 at
 * 250 MB; more are refused 429 before any work).
 */
const IN_FLIGHT = 40;

describe(`process lifecycle (${testMode})`, () => {
  const folders: string[] = [];
  const folder = () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'lifecycle-'));
    folders.push(dir);
    return dir;
  };
  afterAll(() => {
    for (const dir of folders) rmSync(dir, { recursive: true, force: true });
  });

  it('a database that cannot be reached: exit 1 within seconds, one readable line', async () => {
    const started = Date.now();
    const server = run('dist/main.js', baseEnv({ DATABASE_URL: 'postgres://user:secret@127.0.0.1:1/none' }));
    const exit = await server.exited;
    expect(exit.code).toBe(1);
    // No hang: it exits after the connect timeout (about 1.5 s idle).
    expect(exit.at - started).toBeLessThan(20_000);
    expectOneLine(server.output(), /^start failed: cannot reach the database at 127\.0\.0\.1:1: .*DATABASE_URL/);
    expect(server.output()).not.toContain('secret');
  });

  it.skipIf(testMode !== 'postgres')('a database that does not exist: exit 1, one line that says so', async () => {
    const own = await createTestDatabase();
    try {
      const url = new URL(own.url!);
      url.pathname = '/no_such_database_here';
      const server = run('dist/main.js', baseEnv({ DATABASE_URL: url.toString() }));
      expect((await server.exited).code).toBe(1);
      expectOneLine(server.output(), /^start failed: the database named in DATABASE_URL does not exist at /);
    } finally {
      await own.close();
    }
  });

  it('a port in use: exit 1 before opening the database, one line naming PORT', async () => {
    const holder = createTcpServer();
    await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
    const port = (holder.address() as { port: number }).port;
    try {
      const dataDir = folder();
      const server = run('dist/main.js', baseEnv({ DATA_DIR: dataDir, PORT: String(port) }));
      expect((await server.exited).code).toBe(1);
      expectOneLine(server.output(), new RegExp(`^start failed: port ${port} is in use on 127\\.0\\.0\\.1: .*PORT`));
    } finally {
      holder.close();
    }
  });

  it('SIGTERM with a client holding unfinished headers: the connection is closed, the process exits 0 long before the deadline', async () => {
    const dataDir = folder();
    const server = run('dist/main.js', baseEnv({ DATA_DIR: dataDir, SHUTDOWN_TIMEOUT_MS: '15000' }));
    const base = await listening(server);
    const { port } = new URL(base);
    const slow = connect(Number(port), '127.0.0.1', () =>
      slow.write('GET /auth/user-profile HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: '),
    );
    slow.on('error', () => undefined);
    const slowClosed = new Promise<void>((resolve) => slow.on('close', () => resolve()));
    await new Promise((resolve) => setTimeout(resolve, 300));
    const signalled = Date.now();
    server.child.kill('SIGTERM');
    const exit = await server.exited;
    await slowClosed;
    expect(exit.code).toBe(0);
    // Long before the 15 s deadline: it closes the connection at once (about 0.5 s idle).
    expect(exit.at - signalled).toBeLessThan(10_000);
  });

  it('while starting (opening and migrating the database): alive at /healthz, 503 elsewhere, then ready', async () => {
    const probe = createTcpServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    const port = (probe.address() as { port: number }).port;
    await new Promise((resolve) => probe.close(resolve));
    const server = run('dist/main.js', baseEnv({ DATA_DIR: folder(), PORT: String(port) }));
    const base = `http://127.0.0.1:${port}`;
    try {
      const seen: string[] = [];
      const until = Date.now() + 60_000;
      while (Date.now() < until && !seen.includes('ready 200')) {
        const live = await fetch(`${base}/healthz`).catch(() => undefined);
        if (live) {
          expect(live.status).toBe(200);
          const ready = await fetch(`${base}/readyz`);
          const entry = `ready ${ready.status}`;
          if (seen.at(-1) !== entry) seen.push(entry);
          if (ready.status === 503) {
            const api = await fetch(`${base}/auth/user-profile`);
            // Unless it became ready between the two requests.
            if (api.status !== 503) expect((await fetch(`${base}/readyz`)).status).toBe(200);
            else expect((await api.json()).error.code).toBe('SERVICE_UNAVAILABLE');
          }
        }
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      // Not ready while starting, ready afterwards, never the other way round.
      expect(seen).toEqual(['ready 503', 'ready 200']);
    } finally {
      server.child.kill('SIGKILL');
    }
  });

  it('SIGTERM: readiness is 503 at once, the listener keeps serving for SHUTDOWN_DELAY_MS, then the process exits 0', async () => {
    const own = testMode === 'postgres' ? await createTestDatabase() : undefined;
    const server = run(
      'dist/main.js',
      baseEnv(
        own ? { DATABASE_URL: own.url, SHUTDOWN_DELAY_MS: '2000' } : { DATA_DIR: folder(), SHUTDOWN_DELAY_MS: '2000' },
      ),
    );
    try {
      const base = await listening(server);
      expect((await fetch(`${base}/readyz`)).status).toBe(200);
      const signalled = Date.now();
      server.child.kill('SIGTERM');
      // New connections are still accepted and served during the delay; readiness says to go away
      // as soon as the signal is handled.
      let ready = await fetch(`${base}/readyz`);
      while (ready.status === 200 && Date.now() - signalled < 1500) ready = await fetch(`${base}/readyz`);
      expect(ready.status).toBe(503);
      expect(await ready.json()).toEqual({ status: 'unavailable', reason: 'draining' });
      expect((await fetch(`${base}/healthz`)).status).toBe(200);
      const refused = await fetch(`${base}/auth/user-profile`, { headers: { authorization: 'Bearer x' } });
      expect(refused.status).toBe(401);
      const exit = await server.exited;
      expect(exit.code, server.output()).toBe(0);
      expect(exit.at - signalled).toBeGreaterThanOrEqual(2000);
      // No hang: the delay, then a drain with nothing in flight (about 2.1 s idle).
      expect(exit.at - signalled).toBeLessThan(25_000);
    } finally {
      server.child.kill('SIGKILL');
      await own?.close();
    }
  });

  it('SIGTERM as soon as it says it listens (the demo banner still being written) drains and exits 0', async () => {
    const own: TestDatabase | undefined = testMode === 'postgres' ? await createTestDatabase() : undefined;
    const env = { SHUTDOWN_DELAY_MS: '0', SEED_DEMO_ON_START: 'true', LOG_LEVEL: 'info' };
    const server = run(
      'dist/main.js',
      baseEnv(own ? { DATABASE_URL: own.url, ...env } : { DATA_DIR: folder(), ...env }),
    );
    try {
      // A client or an orchestrator may signal it once it has said so: the banner's organizations
      // come from a query after that line, and a signal then must not find Node's default (death).
      await listening(server);
      server.child.kill('SIGTERM');
      const exit = await server.exited;
      expect(exit.code, server.output().slice(-600)).toBe(0);
      expect(server.output()).toMatch(/SIGTERM: shutting down/);
    } finally {
      server.child.kill('SIGKILL');
      await own?.close();
    }
  });

  // Without the drain delay, so that the timeline below is the shutdown's own. (On PostgreSQL this
  // once exited 0: the normal path, released by the deadline's cutting, raced the deadline's exit.)
  it('past the shutdown deadline the retrieval counter is still flushed: no answered retrieval is lost', async () => {
    const own: TestDatabase | undefined = testMode === 'postgres' ? await createTestDatabase() : undefined;
    const dataDir = folder();
    const env = baseEnv(
      own
        ? { DATABASE_URL: own.url, SHUTDOWN_TIMEOUT_MS: '6000', SHUTDOWN_DELAY_MS: '0', SEED_DEMO_ON_START: 'true' }
        : { DATA_DIR: dataDir, SHUTDOWN_TIMEOUT_MS: '6000', SHUTDOWN_DELAY_MS: '0', SEED_DEMO_ON_START: 'true' },
    );
    const server = run('dist/main.js', env);
    try {
      const base = await listening(server);
      const key = await printed(server, /public key (APK_\S+)/);
      const { port } = new URL(base);
      const body = JSON.stringify({ query: '{ organization { organizationName } }' });
      const head = `POST /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Public-Key: ${key}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n`;
      const open = (): Promise<{ socket: Socket; answer: Promise<string> }> =>
        new Promise((resolve) => {
          let received = '';
          const socket = connect(Number(port), '127.0.0.1', () => {
            socket.write(head + body.slice(0, 5));
            resolve({ socket, answer });
          });
          const answer = new Promise<string>((done) => {
            socket.on('data', (chunk) => (received += chunk));
            socket.on('close', () => done(received));
            socket.on('error', () => done(received));
          });
        });
      // One request that never completes keeps the shutdown waiting until its deadline; ten
      // others complete just before it, so that their retrievals are still unwritten then.
      // Warm: the first GraphQL request builds what later ones reuse.
      await fetch(`${base}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-public-key': key },
        body,
      });
      const stuck = await open();
      const late = await Promise.all(Array.from({ length: 10 }, open));
      // Accepted and begun by the server before the signal (a connection still in the kernel's
      // backlog when the listener closes is reset, as with any server): eleven requests in flight,
      // and the scrape that counts them.
      const inFlight = async () =>
        Number(/^api_http_requests_in_flight (\d+)$/m.exec(await (await fetch(`${base}/metrics`)).text())?.[1]);
      await expect.poll(inFlight, { timeout: 10_000, interval: 20 }).toBeGreaterThanOrEqual(12);
      server.child.kill('SIGTERM');
      // The rest of the bodies while the shutdown waits on them (the listener closed, the stuck
      // request holding the process), far from the 6 s deadline however loaded the machine.
      await new Promise((resolve) => setTimeout(resolve, 1500));
      for (const { socket } of late) socket.write(body.slice(5));
      const answers = await Promise.all(late.map((l) => l.answer));
      const exit = await server.exited;
      stuck.socket.destroy();
      expect(
        exit.code,
        `exit ${exit.code}; stuck got: ${(await stuck.answer).slice(0, 300)} | output: ${server.output().slice(-600)}`,
      ).toBe(1);
      const answered = answers.filter((a) => a.startsWith('HTTP/1.1 200')).length;
      // They were answered before the deadline cut the connections (else the test proves nothing).
      expect(answered, answers.map((a) => a.slice(0, 30)).join('|')).toBe(10);
      const check = own ?? (await openDatabase({ dataDir }));
      try {
        const rows = await check.sql.query<{ n: string }>(
          `SELECT "detailsRetrievalCount"::text AS n FROM "Organization" o JOIN "Account" a ON a.id = o."parentId" WHERE a."publicKey" = $1`,
          [key],
        );
        expect(Number(rows[0]!.n)).toBeGreaterThanOrEqual(answered);
        expect(Number(rows[0]!.n)).toBeLessThanOrEqual(11);
      } finally {
        if (!own) await check.close();
      }
    } finally {
      server.child.kill('SIGKILL');
      await own?.close();
    }
  });

  it('the embedded folder has one owner: a second process that writes refuses at once with one line; a dead owner is replaced', async () => {
    const dataDir = folder();
    const server = run('dist/main.js', baseEnv({ DATA_DIR: dataDir }));
    await listening(server);
    const pid = server.child.pid!;
    const env = baseEnv({ DATA_DIR: dataDir });
    // token only reads: it goes through the server's database instead (tokens.test.ts).
    const reader = run('dist/cli/token.js', env, ['someone@example.com']);
    expect((await reader.exited).code).toBe(1);
    expectOneLine(reader.output(), /^token: no account with userID or email "someone@example.com"$/);
    for (const [script, args, command] of [
      ['dist/cli/seed.js', ['--orgs', '1', '--children', '1'], 'npm run db:seed'],
      ['dist/cli/migrate.js', [], 'npm run db:migrate'],
    ] as const) {
      const second = run(script, env, [...args]);
      expect((await second.exited).code).toBe(1);
      expectOneLine(
        second.output(),
        new RegExp(`^${command}: .* is in use by the server \\(pid ${pid}\\): stop it, or use DATABASE_URL$`),
      );
    }
    const another = run('dist/main.js', baseEnv({ DATA_DIR: dataDir }));
    expect((await another.exited).code).toBe(1);
    expectOneLine(another.output(), /^start failed: .* is in use by the server/);
    // A crash leaves the owner file behind: the next process sees its owner is gone and goes on.
    server.child.kill('SIGKILL');
    await server.exited;
    const after = run('dist/cli/migrate.js', env);
    expect((await after.exited).code, after.output()).toBe(0);
    expect(after.output()).toMatch(/up to date/);
  });

  it('stderr closed by its reader: lines are dropped, the process stays idle, SIGTERM still ends it in time', async () => {
    const server = run(
      'dist/main.js',
      baseEnv({ DATA_DIR: folder(), LOG_LEVEL: 'info', SHUTDOWN_DELAY_MS: '0', SHUTDOWN_TIMEOUT_MS: '5000' }),
    );
    try {
      const base = await listening(server);
      // The reader goes away (a log shipper restarting, `| head -1`): the next line written fails.
      server.child.stderr!.destroy();
      for (let i = 0; i < 20; i++) expect((await fetch(`${base}/healthz`)).status).toBe(200);
      // A write that failed and was logged, and failed again, spun a core; now nothing runs.
      const cpu = () => {
        const fields = readFileSync(`/proc/${server.child.pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
        return Number(fields[11]) + Number(fields[12]);
      };
      await new Promise((resolve) => setTimeout(resolve, 300));
      const before = cpu();
      await new Promise((resolve) => setTimeout(resolve, 1000));
      // Clock ticks (1/100 s): under a fifth of a core over that second, where the spin took most of one.
      expect(cpu() - before).toBeLessThan(20);
      // Still serving, and the loss is counted.
      const metrics = await (await fetch(`${base}/metrics`)).text();
      expect(Number(/^api_log_lines_dropped_total (\d+)$/m.exec(metrics)?.[1])).toBeGreaterThanOrEqual(20);
      // The failure was said once, on what was left (stdout).
      expect(server.output().match(/the log destination failed/g)).toHaveLength(1);
      const signalled = Date.now();
      server.child.kill('SIGTERM');
      const exit = await server.exited;
      expect(exit.code).toBe(0);
      // In time: before its 5 s deadline (about 0.3 s idle).
      expect(exit.at - signalled).toBeLessThan(5000);
    } finally {
      server.child.kill('SIGKILL');
    }
  });

  it(`SIGTERM: ${IN_FLIGHT} requests in flight all complete, the counter is flushed, the process exits 0`, async () => {
    const dataDir = folder();
    const own = testMode === 'postgres' ? await createTestDatabase() : undefined;
    const server = run(
      'dist/main.js',
      baseEnv({
        ...(own ? { DATABASE_URL: own.url } : { DATA_DIR: dataDir }),
        LOG_LEVEL: 'info',
        SEED_DEMO_ON_START: 'true',
      }),
    );
    try {
      const base = await listening(server);
      const token = await printed(server, /parent token \(24 h\): (\S+)/);
      const key = await printed(server, /public key (APK_\S+)/);
      // IN_FLIGHT requests truly in flight: each has sent its headers and half of its body when the
      // signal arrives, and sends the rest once the server says it is shutting down.
      const { port } = new URL(base);
      const body = JSON.stringify({ query: '{ organization { organizationName } }' });
      const head = `POST /graphql HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAuthorization: Bearer ${token}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n`;
      const half = Math.floor(body.length / 2);
      const sockets = await Promise.all(
        Array.from(
          { length: IN_FLIGHT },
          () =>
            new Promise<{ socket: Socket; answer: Promise<string> }>((resolve, reject) => {
              const socket = connect(Number(port), '127.0.0.1', () => {
                socket.write(head + body.slice(0, half));
                resolve({ socket, answer });
              });
              let received = '';
              const answer = new Promise<string>((done) => {
                socket.on('data', (chunk) => {
                  received += chunk;
                });
                socket.on('close', () => done(received));
                socket.on('error', () => done(received));
              });
              socket.on('error', reject);
            }),
        ),
      );
      // Every one of them counted in progress by the server before the signal.
      await expect
        .poll(
          async () => metricValue(await (await fetch(`${base}/metrics`)).text(), 'api_memory_requests_in_progress'),
          { timeout: 30_000, interval: 50 },
        )
        .toBe(IN_FLIGHT);
      server.child.kill('SIGTERM');
      await printed(server, /(SIGTERM: shutting down)/);
      for (const { socket } of sockets) socket.write(body.slice(half));
      const answers = await Promise.all(sockets.map((s) => s.answer));
      expect(answers.filter((a) => !a.startsWith('HTTP/1.1 200')).map((a) => a.slice(0, 40))).toEqual([]);
      expect((await server.exited).code, server.output()).toBe(0);
      const check = own ?? (await openDatabase({ dataDir }));
      try {
        const rows = await check.sql.query<{ n: string }>(
          `SELECT "detailsRetrievalCount"::text AS n FROM "Organization" o JOIN "Account" a ON a.id = o."parentId" WHERE a."publicKey" = $1`,
          [key],
        );
        expect(rows[0]!.n).toBe(String(IN_FLIGHT));
      } finally {
        if (!own) await check.close();
      }
    } finally {
      server.child.kill('SIGKILL');
      await own?.close();
    }
  });

  it('an unhandled rejection is logged and survived; an uncaught exception is logged and ends the process with status 1', async () => {
    const dir = folder();
    const survived = run(
      'test/helpers/faulty-main.mjs',
      baseEnv({ DATA_DIR: path.join(dir, 'a'), FAULT: 'rejection', LOG_LEVEL: 'error', LOG_FORMAT: 'json' }),
    );
    try {
      const base = await listening(survived);
      await expect.poll(() => survived.output(), { timeout: 10_000 }).toContain('unhandled rejection');
      expect(survived.output()).toContain('a background task failed');
      expect((await fetch(`${base}/healthz`)).status).toBe(200);
      expect(survived.child.exitCode).toBeNull();
    } finally {
      survived.child.kill('SIGKILL');
    }
    const ended = run(
      'test/helpers/faulty-main.mjs',
      baseEnv({ DATA_DIR: path.join(dir, 'b'), FAULT: 'exception', LOG_LEVEL: 'error', LOG_FORMAT: 'json' }),
    );
    try {
      const exit = await ended.exited;
      expect(exit.code).toBe(1);
      expect(ended.output()).toContain('uncaught exception; shutting down');
      expect(ended.output()).toContain('a bug outside any request');
    } finally {
      ended.child.kill('SIGKILL');
    }
  }, 60_000);
});
