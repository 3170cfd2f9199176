import type pg from 'pg';
import type { SqlDriver } from '../database.js';
import type { Change } from './changes.js';
import { retryDelay, within, type ChangeFeed, type ChangeListener } from './feed.js';
import { LogicalChangeFeed, PUBLICATION } from './logical.js';
import { RelayChangeFeed } from './relay.js';
import { installTriggers, NotifyChangeFeed, removeTriggers } from './triggers.js';

/*
 * Which source a PostgreSQL server's changes come from, chosen at start: the logical replication
 * stream when the server can give it (wal_level = logical, a role with REPLICATION, the
 * publication of the migrations), the announcement triggers otherwise, with one line saying why
 * and how to enable the stream. A server reading the stream removes the triggers a fallback left.
 */

/** `auto`: the stream when available; the others force a source (`CHANGE_SOURCE`). */
export type ChangeSourceChoice = 'auto' | 'logical' | 'triggers';

export type PostgresFeedOptions = {
  connection: pg.ClientConfig;
  sql: SqlDriver;
  choice?: ChangeSourceChoice;
  /** With several instances: one reads the stream and relays it to the others (CHANGE_RELAY_URL). */
  relay?: { url: string; host?: string };
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
  return { walLevel: row?.wal_level ?? 'unknown', replication: row?.replication === true, published: row?.published === true };
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

  get relay(): ChangeFeed['relay'] {
    return this.options.relay ? (this.inner?.relay ?? 'none') : undefined;
  }

  async started(): Promise<void> {
    await this.chosen;
    await this.inner?.started();
  }

  async caughtUp(timeoutMs = 5000): Promise<void> {
    await within(this.chosen, timeoutMs, 'the change source was not chosen');
    if (!this.inner) throw new Error('the change source is not chosen yet');
    await this.inner.caughtUp(timeoutMs);
  }

  subscribe(listener: ChangeListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private async choose(): Promise<void> {
    const { options } = this;
    const choice = options.choice ?? 'auto';
    let failures = 0;
    while (!this.closed) {
      try {
        const why = choice === 'triggers' ? 'CHANGE_SOURCE=triggers' : choice === 'logical' ? undefined : unavailable(await capability(options.sql));
        const forward: ChangeListener = {
          change: (change: Change) => {
            for (const listener of this.listeners) listener.change(change);
          },
          reset: () => {
            for (const listener of this.listeners) listener.reset();
          },
        };
        const common = { connection: options.connection, connectTimeoutMs: options.connectTimeoutMs, heartbeatMs: options.heartbeatMs, staleAfterMs: options.staleAfterMs, heartbeatTimeoutMs: options.heartbeatTimeoutMs, onStateChange: options.onStateChange };
        if (why === undefined) {
          if (await removeTriggers(options.sql)) options.onNotice?.('removed the announcement triggers a server without the replication stream had installed', false);
          if (options.relay) {
            this.inner = new RelayChangeFeed({ ...common, ...options.relay });
            options.onNotice?.(`database changes read from the logical replication stream (publication ${PUBLICATION}) by one instance, relayed to the others; this one's relay: ${options.relay.url}`, false);
          } else {
            this.inner = new LogicalChangeFeed(common);
            options.onNotice?.(`database changes read from the logical replication stream (publication ${PUBLICATION}, a temporary slot per instance)`, false);
          }
        } else {
          this.inner = new NotifyChangeFeed({ ...common, install: () => installTriggers(options.sql) });
          options.onNotice?.(
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
        if (failures === 1) options.onStateChange?.(false, error);
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
