import { rmSync } from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { asClusterOwner, clusterFolder, freePort } from './postgres-cluster.js';

/*
 * A streaming replica of a throwaway cluster, as production runs one: `pg_basebackup -R` from the
 * primary, started on a loopback port of its own (hot standby), its files owned as the primary's are.
 */

export type Replica = {
  url: string;
  /** Replay paused: the replica keeps receiving WAL but shows nothing new (a long lag). */
  pauseReplay(): Promise<void>;
  resumeReplay(): Promise<void>;
  /** Stops the replica's server (the folder is kept until `remove`). */
  stop(): void;
  start(): void;
  remove(): void;
};

export async function startReplica(binDir: string, primaryUrl: string): Promise<Replica> {
  const dir = clusterFolder('pg-replica-');
  const dataDir = path.join(dir, 'data');
  const as = asClusterOwner;
  const primary = new URL(primaryUrl);
  as(path.join(binDir, 'pg_basebackup'), ['-h', primary.hostname, '-p', primary.port, '-U', 'postgres', '-D', dataDir, '-R', '-X', 'stream', '--no-sync', '--checkpoint=fast']);
  const port = await freePort();
  const start = () =>
    as(path.join(binDir, 'pg_ctl'), [
      '-D', dataDir, '-l', path.join(dir, 'server.log'), '-w', '-t', '60',
      // The primary's settings where a standby must match or exceed them (see `startCluster`).
      '-o', `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c hot_standby=on -c fsync=off -c max_connections=300 -c max_wal_senders=100 -c max_replication_slots=100`,
      'start',
    ]);
  start();
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  const admin = async (sql: string) => {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      await client.query(sql);
    } finally {
      await client.end();
    }
  };
  return {
    url,
    pauseReplay: () => admin('SELECT pg_wal_replay_pause()'),
    resumeReplay: () => admin('SELECT pg_wal_replay_resume()'),
    start,
    stop: () => as(path.join(binDir, 'pg_ctl'), ['-D', dataDir, '-m', 'fast', '-w', 'stop']),
    remove: () => {
      try {
        as(path.join(binDir, 'pg_ctl'), ['-D', dataDir, '-m', 'immediate', '-w', 'stop']);
      } catch {
        // Already stopped.
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
