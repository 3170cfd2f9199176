import pg from 'pg';
import type { SqlDriver } from '../sql-driver.js';
import type { Change } from './changes.js';
import { retryDelay, timeBound, type ChangeFeed, type ChangeListener } from './feed.js';
import { LogicalChangeFeed, PUBLICATION } from './logical.js';
import { installTriggers, NotifyChangeFeed, removeTriggers } from './triggers.js';

/*
 * Which source a PostgreSQL server's changes come from, chosen at start: logical replication when the
 * server can give it, the triggers otherwise with one line saying why.
 */

/** `auto`: the stream when available; the others force a source (`CHANGE_SOURCE`). */
export type ChangeSourceChoice = 'auto' | 'logical' | 'triggers';

export type PostgresFeedOptions = {
  connection: pg.ClientConfig;
  sql: SqlDriver;
  choice?: ChangeSourceChoice;
  /** A PostgreSQL 16+ standby of the primary to decode the stream on (CHANGE_DECODE_URL); unset: the primary. */
  decodeFrom?: pg.ClientConfig;
  connectTimeoutMs?: number;
  heartbeatMs?: number;
  staleAfterMs?: number;
  heartbeatTimeoutMs?: number;
  onStateChange?: (live: boolean, error?: unknown) => void;
  /** One line for the operator: which source, and why when it is not the stream. */
  onNotice?: (message: string, fallback: boolean) => void;
};

type Capability = { walLevel: string; replication: boolean; published: boolean };

async function capability(sql: SqlDriver): Promise<Capability> {
  const [row] = await sql.query<{ wal_level: string; replication: boolean | null; published: boolean }>(
    `SELECT current_setting('wal_level') AS wal_level,
            (SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user) AS replication,
            EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1) AS published`,
    [PUBLICATION],
  );
  return {
    walLevel: row?.wal_level ?? 'unknown',
    replication: row?.replication === true,
    published: row?.published === true,
  };
}

/** Why the stream cannot be read, or undefined when it can. */
function unavailable({ walLevel, replication, published }: Capability): string | undefined {
  const reasons = [
    ...(walLevel === 'logical' ? [] : [`wal_level is ${walLevel}, not logical`]),
    ...(replication ? [] : ['the role has no REPLICATION attribute']),
    ...(published ? [] : [`the publication ${PUBLICATION} is missing (run the migrations)`]),
  ];
  return reasons.length === 0 ? undefined : reasons.join('; ');
}

/**
 * Why `standby` cannot decode the primary's stream (PostgreSQL 16+, this primary's, `wal_level =
 * logical`, `hot_standby_feedback`, room for a slot, REPLICATION, the publication), or undefined.
 */
async function standbyProblem(
  standby: pg.ClientConfig,
  sql: SqlDriver,
  connectTimeoutMs: number,
): Promise<string | undefined> {
  const client = new pg.Client({
    ...standby,
    connectionTimeoutMillis: connectTimeoutMs,
    application_name: 'api-cache-check',
  });
  client.on('error', () => {});
  try {
    await client.connect();
    const { rows } = await client.query<{
      version: number;
      recovery: boolean;
      system: string | null;
      wal_level: string;
      feedback: string;
      slots: number;
      senders: number;
      replication: boolean | null;
      published: boolean;
    }>(
      `SELECT current_setting('server_version_num')::int AS version, pg_is_in_recovery() AS recovery,
              (SELECT system_identifier::text FROM pg_control_system()) AS system,
              current_setting('wal_level') AS wal_level, current_setting('hot_standby_feedback') AS feedback,
              current_setting('max_replication_slots')::int AS slots, current_setting('max_wal_senders')::int AS senders,
              (SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user) AS replication,
              EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1) AS published`,
      [PUBLICATION],
    );
    const standbyFacts = rows[0]!;
    if (standbyFacts.version < 160000)
      return `it runs PostgreSQL ${Math.floor(standbyFacts.version / 10000)}: decoding on a standby needs 16 or later`;
    if (!standbyFacts.recovery) return 'it is not a standby (not in recovery)';
    const [primary] = await sql.query<{ system: string | null }>(
      `SELECT system_identifier::text AS system FROM pg_control_system()`,
    );
    if (primary?.system !== standbyFacts.system)
      return 'it is not a standby of DATABASE_URL (another system identifier)';
    const reasons = [
      ...(standbyFacts.wal_level === 'logical' ? [] : [`wal_level is ${standbyFacts.wal_level}, not logical`]),
      ...(standbyFacts.feedback === 'on' ? [] : ['hot_standby_feedback is off']),
      ...(standbyFacts.slots > 0 && standbyFacts.senders > 0 ? [] : ['max_replication_slots or max_wal_senders is 0']),
      ...(standbyFacts.replication ? [] : ['the role has no REPLICATION attribute there']),
      ...(standbyFacts.published ? [] : [`the publication ${PUBLICATION} is missing there`]),
    ];
    return reasons.length === 0 ? undefined : reasons.join('; ');
  } catch (error) {
    return `it could not be asked (${error instanceof Error ? error.message : String(error)})`;
  } finally {
    await client.end().catch(() => {});
  }
}

/** The feed of a PostgreSQL server, once its source is chosen; until then not live. */
export class PostgresChangeFeed implements ChangeFeed {
  private inner: ChangeFeed | undefined;
  private readonly listeners = new Set<ChangeListener>();
  private readonly chosen: Promise<void>;
  private closed = false;

  constructor(private readonly options: PostgresFeedOptions) {
    this.chosen = this.choose();
  }

  get live(): boolean {
    return this.inner?.live ?? false;
  }

  get source(): ChangeFeed['source'] {
    return this.inner?.source ?? 'none';
  }

  async started(): Promise<void> {
    await this.chosen;
    await this.inner?.started();
  }

  async caughtUp(timeoutMs = 5000): Promise<void> {
    await timeBound(this.chosen, timeoutMs, 'the change source was not chosen');
    if (!this.inner) throw new Error('the change source is not chosen yet');
    await this.inner.caughtUp(timeoutMs);
  }

  subscribe(listener: ChangeListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private async choose(): Promise<void> {
    const { choice = 'auto', sql, decodeFrom, onNotice, ...common } = this.options;
    const forward: ChangeListener = {
      change: (change: Change) => {
        for (const listener of this.listeners) listener.change(change);
      },
      reset: () => {
        for (const listener of this.listeners) listener.reset();
      },
    };
    let failures = 0;
    while (!this.closed) {
      try {
        const why =
          choice === 'triggers'
            ? 'CHANGE_SOURCE=triggers'
            : choice === 'logical'
              ? undefined
              : unavailable(await capability(sql));
        if (why === undefined) {
          if (await removeTriggers(sql))
            onNotice?.(
              'removed the announcement triggers a server without the replication stream had installed',
              false,
            );
          const problem = decodeFrom && (await standbyProblem(decodeFrom, sql, common.connectTimeoutMs ?? 2000));
          const onStandby = decodeFrom !== undefined && problem === undefined;
          this.inner = new LogicalChangeFeed(onStandby ? { ...common, decodeFrom } : common);
          if (problem !== undefined)
            onNotice?.(
              `CHANGE_DECODE_URL cannot decode the stream: ${problem}; decoding on the primary instead (see src/db/capture/README.md)`,
              true,
            );
          else
            onNotice?.(
              `database changes read from the logical replication stream (publication ${PUBLICATION}${onStandby ? '), decoded on the standby CHANGE_DECODE_URL names (a temporary slot per instance there)' : ', a temporary slot per instance)'}`,
              false,
            );
        } else {
          this.inner = new NotifyChangeFeed({ ...common, install: () => installTriggers(sql) });
          onNotice?.(
            `logical replication is not available (${why}): database changes are announced by triggers in every writer's transaction, which costs the writers. ` +
              `To read the replication stream instead, set wal_level = logical (and max_replication_slots, max_wal_senders: one each per instance) and grant the role REPLICATION; see src/ops/README.md`,
            true,
          );
        }
        this.inner.subscribe(forward);
        if (this.closed) await this.inner.close();
        return;
      } catch (error) {
        failures += 1;
        if (failures === 1) common.onStateChange?.(false, error);
        await new Promise((resolve) => setTimeout(resolve, retryDelay(failures)).unref());
      }
    }
  }

  /** Not waiting for a choice still being made: one made after this closes its feed at once. */
  async close(): Promise<void> {
    this.closed = true;
    await this.inner?.close();
  }
}
