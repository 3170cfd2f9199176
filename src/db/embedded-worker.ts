/*
 * The embedded database's thread. PGlite runs each statement to completion on the thread that
 * owns it; here that is this worker, so a long search never holds up the server's event loop.
 * The server talks to it over the PostgreSQL wire protocol on a Unix socket in a private folder,
 * with the same `pg` driver (and the same code) it uses for a PostgreSQL server.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { parentPort, workerData } from 'node:worker_threads';
import { PGlite } from '@electric-sql/pglite';
import { pg_trgm } from '@electric-sql/pglite/contrib/pg_trgm';
import { PGLiteSocketServer } from '@electric-sql/pglite-socket';
import type { EmbeddedCommand, EmbeddedReply, EmbeddedWorkerData } from './embedded.js';

const data = workerData as EmbeddedWorkerData;
const port = parentPort!;
const reply = (message: EmbeddedReply) => port.postMessage(message);

async function open(): Promise<{ db: PGlite; server: PGLiteSocketServer }> {
  const db = new PGlite({
    dataDir: data.dataDir,
    extensions: { pg_trgm },
    ...(data.snapshot ? { loadDataDir: new Blob([readFileSync(data.snapshot)]) } : {}),
  });
  await db.waitReady;
  // The pool holds one connection; the second slot lets its replacement in while the server
  // still closes a connection the pool gave up on (a query past its time bound); the third is for
  // a read-only command run beside the server (`npm run token -- --list`).
  const server = new PGLiteSocketServer({ db, path: data.socketPath, maxConnections: 3 });
  await server.start();
  return { db, server };
}

try {
  const { db, server } = await open();
  port.on('message', async (command: EmbeddedCommand) => {
    try {
      if (command.type === 'dump') {
        const tarball = await db.dumpDataDir('none');
        writeFileSync(command.file, Buffer.from(await tarball.arrayBuffer()));
        reply({ type: 'dumped' });
      } else if (command.type === 'stop') {
        await server.stop();
        if (!db.closed) await db.close();
        reply({ type: 'stopped' });
        port.close();
      }
    } catch (error) {
      reply({ type: 'failed', message: error instanceof Error ? error.message : String(error) });
    }
  });
  reply({ type: 'ready' });
} catch (error) {
  reply({ type: 'failed', message: error instanceof Error ? error.message : String(error) });
  port.close();
}
