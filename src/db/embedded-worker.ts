/*
 * The embedded database's thread. PGlite runs each statement to completion on the thread that
 * owns it; here that is this worker, so a long search never holds up the server's event loop.
 * The server talks to it over the PostgreSQL wire protocol on a Unix socket in a private folder,
 * with the same `pg` driver (and the same code) it uses for a PostgreSQL server.
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
  // The pool holds one connection; the second slot lets its replacement in while the server
  // still closes a connection the pool gave up on (a query past its time bound); the third is for
  // a read-only command run beside the server (`npm run token -- --list`).
  const server = new PGLiteSocketServer({ db, path: data.socketPath, maxConnections: 3 });
  await server.start();
  return { db, server };
}

/**
 * Reads the notifications (`NotificationResponse`, type 'A') out of every answer PGlite sends to
 * a client of the socket and hands them to the server's thread. PGlite is one session: a change
 * committed by any client announces itself in the answer to that client's statement, which the
 * server's own connection would never see.
 */
function readAnnouncements(db: PGlite): void {
  const stream = db.execProtocolRawStream.bind(db);
  db.execProtocolRawStream = (message, options) => {
    // What is left of a message cut between two chunks: the bytes of a notification (kept until
    // it is whole: a few hundred bytes), or only a count of the bytes of anything else to skip,
    // so that a long answer streamed in many chunks is read once, never copied again.
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
