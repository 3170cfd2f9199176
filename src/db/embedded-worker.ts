/*
 * The embedded database's thread, so a long statement never holds up the server's event loop; the
 * server reaches it over the PostgreSQL protocol on a private socket, with the same `pg` driver.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { parentPort, workerData } from 'node:worker_threads';
import { PGlite } from '@electric-sql/pglite';
import { btree_gin } from '@electric-sql/pglite/contrib/btree_gin';
import { pg_trgm } from '@electric-sql/pglite/contrib/pg_trgm';
import { PGLiteSocketServer } from '@electric-sql/pglite-socket';
import type { EmbeddedCommand, EmbeddedReply, EmbeddedWorkerData } from './embedded.js';

const data = workerData as EmbeddedWorkerData;
const port = parentPort!;
const reply = (message: EmbeddedReply) => port.postMessage(message);

async function open(): Promise<{ db: PGlite; server: PGLiteSocketServer }> {
  const db = new PGlite({
    dataDir: data.dataDir,
    extensions: { pg_trgm, btree_gin },
    ...(data.snapshot ? { loadDataDir: new Blob([readFileSync(data.snapshot)]) } : {}),
  });
  await db.waitReady;
  readAnnouncements(db);
  // One connection for the pool, one for its replacement while a given-up one closes, one for a read-only command.
  const server = new PGLiteSocketServer({ db, path: data.socketPath, maxConnections: 3 });
  await server.start();
  return { db, server };
}

/** Hands the notifications in every answer PGlite sends to any client of the socket to the server's thread. */
function readAnnouncements(db: PGlite): void {
  const stream = db.execProtocolRawStream.bind(db);
  db.execProtocolRawStream = (message, options) => {
    // What is left of a message cut between chunks: a notification's bytes, or a count of others' to skip.
    let pending: Buffer | undefined;
    let skip = 0;
    return stream(message, {
      ...options,
      onRawData: (data: Uint8Array) => {
        const chunk = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
        let at = Math.min(skip, chunk.length);
        skip -= at;
        let buffer = chunk;
        if (pending) {
          buffer = Buffer.concat([pending, chunk]);
          pending = undefined;
        }
        while (buffer.length - at >= 5) {
          const length = buffer.readInt32BE(at + 1);
          const isNotification = buffer[at] === 0x41; /* A */
          if (buffer.length - at < 1 + length) {
            if (!isNotification) {
              skip = 1 + length - (buffer.length - at);
              at = buffer.length;
            }
            break;
          }
          if (isNotification) {
            // pid (4 bytes), channel and payload as NUL-terminated strings.
            const start = at + 5 + 4;
            const channelEnd = buffer.indexOf(0, start);
            const payloadEnd = buffer.indexOf(0, channelEnd + 1);
            reply({
              type: 'notification',
              channel: buffer.toString('utf8', start, channelEnd),
              payload: buffer.toString('utf8', channelEnd + 1, payloadEnd),
            });
          }
          at += 1 + length;
        }
        // A notification, or a header, cut between two chunks: a copy (the chunk is reused).
        if (at < buffer.length) pending = Buffer.from(buffer.subarray(at));
        options.onRawData(data);
      },
    });
  };
}

try {
  const { db, server } = await open();
  port.on('message', async (command: EmbeddedCommand) => {
    try {
      if (command.type === 'flush') {
        reply({ type: 'flushed', id: command.id });
      } else if (command.type === 'dump') {
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
