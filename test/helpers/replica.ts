import { existsSync, rmSync } from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { asClusterOwner, clusterFolder, onFreePort, portTakenIn } from './postgres-cluster.js';

/*
 * A streaming replica of a throwaway cluster, as production runs one: `pg_basebackup -R` from the
 * primary, started on a loopback port of its own (hot standby), its files owned as the primary's are.
 * Where the binaries have no `pg_basebackup` (the npm registry's PostgreSQL 16-18), the primary's
 * data folder is copied between `pg_backup_start` and `pg_backup_stop` (PostgreSQL's low-level
 * backup), and the standby streams the rest from the primary. Either way it can decode a logical
 * stream (PostgreSQL 16+): `wal_level = logical` and `hot_standby_feedback` on.
 */

export type Replica = {
  url: string;
  /** Its data folder (its server's `postmaster.pid` names the server's process). */
  dataDir: string;
  /** Replay paused: the replica keeps receiving WAL but shows nothing new (a long lag). */
  pauseReplay(): Promise<void>;
  resumeReplay(): Promise<void>;
  /** Stops the replica's server (the folder is kept until `remove`). */
  stop(): void;
  /** `settings`: more server options (`-c name=value`), for this start only. */
  start(settings?: string): void;
  remove(): void;
};

/** `primaryDataDir`: the primary's folder on this machine, copied when there is no `pg_basebackup`. */
export async function startReplica(binDir: string, primaryUrl: string, primaryDataDir?: string): Promise<Replica> {
  const dir = clusterFolder('pg-replica-');
  const dataDir = path.join(dir, 'data');
  const as = asClusterOwner;
  const primary = new URL(primaryUrl);
  if (existsSync(path.join(binDir, 'pg_basebackup'))) {
    as(path.join(binDir, 'pg_basebackup'), [
      '-h',
      primary.hostname,
      '-p',
      primary.port,
      '-U',
      'postgres',
      '-D',
      dataDir,
      '-R',
      '-X',
      'stream',
      '--no-sync',
      '--checkpoint=fast',
    ]);
  } else {
    if (!primaryDataDir) throw new Error(`${binDir} has no pg_basebackup, and the primary's data folder is not known`);
    await copyRunningCluster(primaryUrl, primaryDataDir, dataDir);
  }
  let port = 0;
  const log = path.join(dir, 'server.log');
  const start = (settings = '') =>
    as(path.join(binDir, 'pg_ctl'), [
      '-D',
      dataDir,
      '-l',
      log,
      '-w',
      '-t',
      '60',
      // The primary's settings where a standby must match or exceed them (see `startCluster`).
      '-o',
      `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c hot_standby=on -c hot_standby_feedback=on -c wal_level=logical -c fsync=off -c max_connections=300 -c max_wal_senders=100 -c max_replication_slots=100 ${settings}`.trim(),
      'start',
    ]);
  // Later starts (a restart) keep the port the first one found free.
  port = await onFreePort(async (free) => {
    port = free;
    start();
    return free;
  }, portTakenIn(log));
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
    dataDir,
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

/** A running cluster's folder copied as a standby of it (PostgreSQL's low-level backup). */
async function copyRunningCluster(primaryUrl: string, from: string, to: string): Promise<void> {
  const client = new pg.Client({ connectionString: primaryUrl });
  await client.connect();
  try {
    await client.query(`SELECT pg_backup_start('api-test-standby', true)`);
    // As pg_basebackup does, a file that vanishes while it is copied is passed over: it belonged
    // to a database dropped meanwhile (other test files drop theirs), which the standby's replay
    // of the WAL drops as well. tar exits 1 when a file changed or vanished as it was read.
    asClusterOwner('sh', [
      '-c',
      `mkdir -p "$2" && chmod 700 "$2" && { tar -C "$1" -cf - --warning=no-file-changed --warning=no-file-removed --ignore-failed-read . ; [ $? -le 1 ]; } | tar -C "$2" -xpf -`,
      'sh',
      from,
      to,
    ]);
    const { rows } = await client.query<{ labelfile: string }>('SELECT labelfile FROM pg_backup_stop(true)');
    const primary = new URL(primaryUrl);
    // The copy's WAL and lock file are the primary's: the standby fetches what it needs by streaming.
    asClusterOwner('sh', [
      '-c',
      `rm -f "$1/postmaster.pid" "$1/postmaster.opts" && rm -rf "$1"/pg_wal/* && printf '%s' "$2" > "$1/backup_label" && touch "$1/standby.signal" && printf "primary_conninfo = 'host=%s port=%s user=postgres'\\n" "$3" "$4" >> "$1/postgresql.auto.conf"`,
      'sh',
      to,
      rows[0]!.labelfile,
      primary.hostname,
      primary.port,
    ]);
  } finally {
    await client.end();
  }
}
