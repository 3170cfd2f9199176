import { EventEmitter } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Worker } from 'node:worker_threads';

export type EmbeddedWorkerData = {
  /** A folder; in memory when absent. */
  dataDir?: string;
  /** In memory: a tarball (from `dump`) to start from. */
  snapshot?: string;
  socketPath: string;
};
export type EmbeddedCommand = { type: 'dump'; file: string } | { type: 'stop' } | { type: 'flush'; id: number };
export type EmbeddedReply =
  | { type: 'ready' }
  | { type: 'dumped' }
  | { type: 'stopped' }
  | { type: 'failed'; message: string }
  | { type: 'notification'; channel: string; payload: string }
  | { type: 'flushed'; id: number };

/** The port in the socket's name (`.s.PGSQL.<port>`), as the `pg` driver looks for it. */
export const EMBEDDED_PORT = 5432;

/** How long opening may take: replaying a large folder's write-ahead log can take a while. */
const OPEN_TIMEOUT_MS = 300_000;
/** How long closing may take before the thread is stopped regardless. */
const STOP_TIMEOUT_MS = 30_000;

export interface EmbeddedServer {
  /** The private folder holding the socket: `host` for the `pg` driver. */
  readonly socketDir: string;
  readonly port: number;
  /** The session's notifications, read by the thread out of every answer it sends. */
  readonly announcements: EventEmitter;
  /** Resolves once every notification the thread read before the call has been emitted. */
  flushAnnouncements(): Promise<void>;
  /** Writes the whole database as a tarball (the test suites start each file from one). */
  dump(file: string): Promise<void>;
  /** Closes the database (flushing it to its folder) and ends the thread. */
  stop(): Promise<void>;
}

/** Starts PGlite on its own thread, serving a private Unix socket; `onLost` if the thread ends unasked. */
export async function startEmbeddedServer(
  options: { dataDir?: string; snapshot?: string },
  onLost: (error: Error) => void = () => {},
): Promise<EmbeddedServer> {
  const socketDir = mkdtempSync(path.join(tmpdir(), 'credits-db-'));
  const port = EMBEDDED_PORT;
  const data: EmbeddedWorkerData = { ...options, socketPath: path.join(socketDir, `.s.PGSQL.${port}`) };
  const worker = spawnWorker(data);
  let stopping = false;
  let exited = false;
  const waiters = new Set<(reply: EmbeddedReply | Error) => void>();
  const announcements = new EventEmitter();
  const flushes = new Map<number, () => void>();
  let flushId = 0;
  worker.on('message', (message: EmbeddedReply) => {
    if (message.type === 'notification') {
      announcements.emit('notification', message.payload, message.channel);
      return;
    }
    if (message.type === 'flushed') {
      flushes.get(message.id)?.();
      flushes.delete(message.id);
      return;
    }
    for (const waiter of waiters) waiter(message);
  });
  worker.on('error', (error) => {
    for (const waiter of waiters) waiter(error);
  });
  worker.on('exit', (code) => {
    exited = true;
    const error = new Error(`the embedded database's thread ended (code ${code})`);
    for (const waiter of waiters) waiter(error);
    rmSync(socketDir, { recursive: true, force: true });
    if (!stopping) onLost(error);
  });

  /** The next reply of one of `types`, a failure, or an error after `timeoutMs`. */
  const next = (types: EmbeddedReply['type'][], timeoutMs: number, what: string) =>
    new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => settle(new Error(`the embedded database did not ${what} within ${timeoutMs / 1000} s`)),
        timeoutMs,
      );
      const settle = (reply: EmbeddedReply | Error) => {
        if (!(reply instanceof Error) && reply.type !== 'failed' && !types.includes(reply.type)) return;
        clearTimeout(timer);
        waiters.delete(settle);
        if (reply instanceof Error) reject(reply);
        else if (reply.type === 'failed') reject(new Error(reply.message));
        else resolve();
      };
      waiters.add(settle);
    });

  try {
    await next(['ready'], OPEN_TIMEOUT_MS, 'open');
  } catch (error) {
    stopping = true;
    await worker.terminate();
    rmSync(socketDir, { recursive: true, force: true });
    throw error;
  }

  return {
    socketDir,
    port,
    announcements,
    // The thread's messages arrive in order: its answer comes after every notification before it.
    flushAnnouncements: () =>
      new Promise<void>((resolve) => {
        const id = ++flushId;
        flushes.set(id, resolve);
        worker.postMessage({ type: 'flush', id } satisfies EmbeddedCommand);
      }),
    dump: async (file) => {
      const done = next(['dumped'], OPEN_TIMEOUT_MS, 'write its snapshot');
      worker.postMessage({ type: 'dump', file } satisfies EmbeddedCommand);
      await done;
    },
    stop: async () => {
      if (stopping || exited) return;
      stopping = true;
      const done = next(['stopped'], STOP_TIMEOUT_MS, 'close');
      worker.postMessage({ type: 'stop' } satisfies EmbeddedCommand);
      try {
        await done;
      } finally {
        await worker.terminate();
        rmSync(socketDir, { recursive: true, force: true });
      }
    },
  };
}

/** The thread runs `embedded-worker.js` beside this file, or `embedded-worker.ts` through tsx from the sources. */
function spawnWorker(workerData: EmbeddedWorkerData): Worker {
  const here = import.meta.url;
  if (!here.endsWith('.ts')) return new Worker(new URL('./embedded-worker.js', here), { workerData });
  const entry = new URL('./embedded-worker.ts', here).href;
  const load = `import('tsx/esm/api').then((tsx) => tsx.tsImport(${JSON.stringify(entry)}, ${JSON.stringify(here)}))`;
  return new Worker(load, { eval: true, workerData });
}
