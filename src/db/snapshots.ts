import { LRUCache } from 'lru-cache';
import type { SqlDriver } from './sql-driver.js';

/* Database snapshots as cache reads carry them, so that a read that saw a change announced meanwhile is kept. */

/** What a read's snapshot saw (`pg_current_snapshot()`). */
export type Snapshot = { readonly xmin: number; readonly xmax: number; readonly xip: readonly number[] };

/** The snapshot column a read for the cache adds to its select list (see `SnapshotQuery`). */
const SNAPSHOT_COLUMN = 'pg_current_snapshot()::text AS "readSnapshot"';

const NO_TRANSACTIONS: readonly number[] = Object.freeze([]);

/** `xmin:xmax:xip,...` as PostgreSQL prints a snapshot; undefined for anything else. */
export function parseSnapshot(text: unknown): Snapshot | undefined {
  if (typeof text !== 'string') return undefined;
  const match = /^(\d+):(\d+):([\d,]*)$/.exec(text);
  if (!match) return undefined;
  const xip = match[3] === '' ? NO_TRANSACTIONS : match[3]!.split(',').map(Number);
  return { xmin: Number(match[1]), xmax: Number(match[2]), xip };
}

/** Recent snapshots by their text, so that reads between commits share one object. */
const recentSnapshots = new LRUCache<string, Snapshot>({ max: 64 });

function sharedSnapshot(text: unknown): Snapshot | undefined {
  if (typeof text !== 'string' || text.length > 256) return parseSnapshot(text);
  let snapshot = recentSnapshots.get(text);
  if (snapshot === undefined) {
    snapshot = parseSnapshot(text);
    if (snapshot) recentSnapshots.set(text, snapshot);
  }
  return snapshot;
}

/** Whether the change of transaction `version` was visible to a read with this snapshot. */
export function sees(snapshot: Snapshot, version: number): boolean {
  return version < snapshot.xmin || (version < snapshot.xmax && !snapshot.xip.includes(version));
}

/** A statement for the cache, `SELECT <columns> <rest>`, to which the cache adds the snapshot column. */
export type SnapshotQuery = <T extends Record<string, unknown>>(
  columns: string,
  rest: string,
  params?: unknown[],
) => Promise<T[]>;

/** A read's query function and what its statements saw (one statement: its snapshot; more: none). */
export function snapshotQuery(sql: Pick<SqlDriver, 'query'> | undefined): {
  query: SnapshotQuery;
  seen: () => Snapshot | undefined;
} {
  let statements = 0;
  let seen: Snapshot | undefined;
  const query: SnapshotQuery = async <T extends Record<string, unknown>>(
    columns: string,
    rest: string,
    params?: unknown[],
  ) => {
    if (!sql) throw new Error('this cache was made without a database to read');
    statements += 1;
    const rows = await sql.query<T & { readSnapshot?: unknown }>(
      `SELECT ${columns}, ${SNAPSHOT_COLUMN} ${rest}`,
      params,
    );
    seen = sharedSnapshot(rows[0]?.readSnapshot);
    // Copies without the column rather than `delete`, which would leave each row a slow, larger
    // dictionary-mode object (and some are kept in the cache as they are).
    return rows.map(({ readSnapshot: _snapshot, ...row }) => row as unknown as T);
  };
  // Several statements saw several snapshots: none of them stands for the whole read.
  return { query, seen: () => (statements === 1 ? seen : undefined) };
}
