import { createHash } from 'node:crypto';
import type { EventEmitter } from 'node:events';
import pg from 'pg';
import type { SqlDriver } from '../sql-driver.js';
import { BaseFeed, feedTiming, retryDelay, retryLater, timeBound, type ChangeFeed } from './feed.js';

/*
 * The trigger feed, where logical replication is not available (the embedded database, `wal_level`
 * below `logical`): statement-level triggers announce each committed change with `pg_notify` on
 * `api_cache`. They run in every writer's transaction, so they are installed only then.
 */

export const CHANGE_CHANNEL = 'api_cache';

/** Installing or removing the triggers: one server at a time (an arbitrary, fixed advisory lock id). */
const TRIGGERS_LOCK_ID = 72707370;

/** The triggers `TRIGGERS_SQL` creates, by name: what the listener's check looks for. */
export const TRIGGER_NAMES = ['account', 'organization', 'purchases', 'usage'].flatMap((entity) =>
  ['insert', 'update', 'delete', 'truncate'].map((op) => `api_cache_${entity}_${op}`),
);

const ACTIVITY_COLUMNS = `ARRAY['childSignupCount', 'signInCount', 'emailConfirmationCount',
    'providerAAuthCount', 'providerBAuthCount', 'providerCAuthCount', 'providerDAuthCount',
    'lastLogin', 'lastLoginProvider', 'lastLoginAttempt', 'loginAttempts', 'updatedAt']`;

/**
 * The announcement triggers, statement-level with transition tables ("all" past 500 rows). They say
 * whether an account's identity changed, its last login, its parent, and whether an organization
 * changed beyond its balances; the retrieval counter's writes are not announced.
 */
const TRIGGERS_SQL = `
CREATE OR REPLACE FUNCTION "api_cache_announce"(entity text, keys jsonb) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  item jsonb;
  version bigint := pg_current_xact_id()::text::bigint;
BEGIN
  IF keys IS NULL OR jsonb_array_length(keys) = 0 THEN
    RETURN;
  END IF;
  IF jsonb_array_length(keys) > 500 THEN
    PERFORM pg_notify('${CHANGE_CHANNEL}', jsonb_build_object('t', entity, 'all', true, 'x', version)::text);
    RETURN;
  END IF;
  FOR item IN SELECT value FROM jsonb_array_elements(keys) LOOP
    PERFORM pg_notify('${CHANGE_CHANNEL}', (jsonb_build_object('t', entity, 'x', version) || item)::text);
  END LOOP;
END $$;

CREATE OR REPLACE FUNCTION "api_cache_account"() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  keys jsonb;
  activity CONSTANT text[] := ${ACTIVITY_COLUMNS};
BEGIN
  IF TG_OP = 'INSERT' THEN
    SELECT jsonb_agg(DISTINCT jsonb_strip_nulls(jsonb_build_object('id', "id", 'k', "publicKey", 'p', "parentId", 'o', 'i', 's', true))) INTO keys FROM new_rows;
  ELSIF TG_OP = 'DELETE' THEN
    SELECT jsonb_agg(DISTINCT jsonb_strip_nulls(jsonb_build_object('id', "id", 'k', "publicKey", 'p', "parentId", 'o', 'd', 's', true))) INTO keys FROM old_rows;
  ELSE
    SELECT jsonb_agg(DISTINCT jsonb_strip_nulls(jsonb_build_object('id', id, 'k', k, 'p', p, 'o', op, 's', s, 'l', l, 'n', n))) INTO keys FROM (
      SELECT n."id" AS id, n."publicKey" AS k, n."parentId" AS p,
             CASE WHEN o."id" IS NULL OR o."parentId" IS DISTINCT FROM n."parentId" THEN 'i' END AS op,
             (o."id" IS NULL OR (to_jsonb(n) - activity) IS DISTINCT FROM (to_jsonb(o) - activity)) AS s,
             (extract(epoch FROM o."lastLogin") * 1000)::float8 AS l,
             (extract(epoch FROM n."lastLogin") * 1000)::float8 AS n
      FROM new_rows n LEFT JOIN old_rows o ON o."id" = n."id"
      WHERE o."id" IS NULL OR to_jsonb(n) IS DISTINCT FROM to_jsonb(o)
      UNION
      SELECT o."id", o."publicKey", o."parentId",
             CASE WHEN n."id" IS NULL OR n."parentId" IS DISTINCT FROM o."parentId" THEN 'd' END, true, NULL::float8, NULL::float8
      FROM old_rows o LEFT JOIN new_rows n ON n."id" = o."id"
      WHERE n."id" IS NULL OR n."publicKey" IS DISTINCT FROM o."publicKey" OR n."parentId" IS DISTINCT FROM o."parentId"
    ) changed;
  END IF;
  PERFORM "api_cache_announce"('account', keys);
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION "api_cache_organization"() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  keys jsonb;
  unannounced CONSTANT text[] := ARRAY['detailsRetrievalCount', 'lastDetailsRetrievalAt'];
  balances CONSTANT text[] := ARRAY['creditBalance', 'accountBalance', 'availableBalance', 'updatedAt'];
BEGIN
  IF TG_OP = 'INSERT' THEN
    SELECT jsonb_agg(DISTINCT jsonb_build_object('id', "parentId", 's', true)) INTO keys FROM new_rows;
  ELSIF TG_OP = 'DELETE' THEN
    SELECT jsonb_agg(DISTINCT jsonb_build_object('id', "parentId", 's', true)) INTO keys FROM old_rows;
  ELSE
    SELECT jsonb_agg(DISTINCT jsonb_build_object('id', id, 's', s)) INTO keys FROM (
      SELECT n."parentId" AS id,
             (o."parentId" IS NULL OR (to_jsonb(n) - unannounced - balances) IS DISTINCT FROM (to_jsonb(o) - unannounced - balances)
              OR (n."creditBalance" > 0) IS DISTINCT FROM (o."creditBalance" > 0)) AS s
      FROM new_rows n LEFT JOIN old_rows o ON o."parentId" = n."parentId"
      WHERE o."parentId" IS NULL OR (to_jsonb(n) - unannounced) IS DISTINCT FROM (to_jsonb(o) - unannounced)
      UNION
      SELECT o."parentId", true FROM old_rows o LEFT JOIN new_rows n ON n."parentId" = o."parentId"
      WHERE n."parentId" IS NULL
    ) changed;
  END IF;
  PERFORM "api_cache_announce"('organization', keys);
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION "api_cache_by_organization"() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  keys jsonb;
BEGIN
  IF TG_OP = 'INSERT' THEN
    SELECT jsonb_agg(DISTINCT jsonb_build_object('id', "organizationId")) INTO keys FROM new_rows;
  ELSIF TG_OP = 'DELETE' THEN
    SELECT jsonb_agg(DISTINCT jsonb_build_object('id', "organizationId")) INTO keys FROM old_rows;
  ELSE
    SELECT jsonb_agg(DISTINCT jsonb_build_object('id', id)) INTO keys
    FROM (SELECT "organizationId" AS id FROM new_rows UNION SELECT "organizationId" FROM old_rows) changed;
  END IF;
  PERFORM "api_cache_announce"(TG_ARGV[0], keys);
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION "api_cache_truncate"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('${CHANGE_CHANNEL}', jsonb_build_object('t', TG_ARGV[0], 'all', true)::text);
  RETURN NULL;
END $$;
${[
  ['account', 'Account', '"api_cache_account"()'],
  ['organization', 'Organization', '"api_cache_organization"()'],
  ['purchases', 'PackagePurchase', `"api_cache_by_organization"('purchases')`],
  ['usage', 'MonthlyUsage', `"api_cache_by_organization"('usage')`],
]
  .map(
    ([entity, table, call]) => `
DROP TRIGGER IF EXISTS "api_cache_${entity}_insert" ON "${table}";
CREATE TRIGGER "api_cache_${entity}_insert" AFTER INSERT ON "${table}"
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ${call};
DROP TRIGGER IF EXISTS "api_cache_${entity}_update" ON "${table}";
CREATE TRIGGER "api_cache_${entity}_update" AFTER UPDATE ON "${table}"
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ${call};
DROP TRIGGER IF EXISTS "api_cache_${entity}_delete" ON "${table}";
CREATE TRIGGER "api_cache_${entity}_delete" AFTER DELETE ON "${table}"
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION ${call};
DROP TRIGGER IF EXISTS "api_cache_${entity}_truncate" ON "${table}";
CREATE TRIGGER "api_cache_${entity}_truncate" AFTER TRUNCATE ON "${table}"
  FOR EACH STATEMENT EXECUTE FUNCTION "api_cache_truncate"('${entity}');`,
  )
  .join('\n')}
`;

const REMOVE_SQL = `
${[
  ['account', 'Account'],
  ['organization', 'Organization'],
  ['purchases', 'PackagePurchase'],
  ['usage', 'MonthlyUsage'],
]
  .flatMap(([entity, table]) =>
    ['insert', 'update', 'delete', 'truncate'].map(
      (op) => `DROP TRIGGER IF EXISTS "api_cache_${entity}_${op}" ON "${table}";`,
    ),
  )
  .join('\n')}
DROP FUNCTION IF EXISTS "api_cache_account"();
DROP FUNCTION IF EXISTS "api_cache_organization"();
DROP FUNCTION IF EXISTS "api_cache_by_organization"();
DROP FUNCTION IF EXISTS "api_cache_truncate"();
DROP FUNCTION IF EXISTS "api_cache_announce"(text, jsonb);
`;

/** How many of the announcement triggers exist now (all of them: `TRIGGER_NAMES.length`). */
export const COUNT_TRIGGERS_SQL = `SELECT count(*)::int AS installed FROM pg_trigger WHERE NOT tgisinternal AND tgname = ANY(ARRAY[${TRIGGER_NAMES.map((name) => `'${name}'`).join(', ')}])`;

/** The installed version, written as the comment of the announcing function. */
const TRIGGERS_VERSION = createHash('sha256').update(TRIGGERS_SQL).digest('hex').slice(0, 16);
const INSTALLED_SQL = `SELECT obj_description(to_regprocedure('"api_cache_announce"(text, jsonb)'), 'pg_proc') = '${TRIGGERS_VERSION}' AS current,
  (${COUNT_TRIGGERS_SQL.replace('SELECT count(*)::int AS installed', 'SELECT count(*)::int')}) AS installed`;

async function underLock(sql: SqlDriver, script: string): Promise<void> {
  await sql.withSession(async (connection) => {
    try {
      await connection.exec(`BEGIN; SELECT pg_advisory_xact_lock(${TRIGGERS_LOCK_ID}); ${script} COMMIT;`);
    } catch (error) {
      // The embedded database's one session must not stay in the failed transaction.
      await connection.exec('ROLLBACK').catch(() => {});
      throw error;
    }
  });
}

/** Installs the triggers unless this version is there: creating one locks its table for a moment. */
export async function installTriggers(sql: SqlDriver): Promise<void> {
  const [row] = await sql.query<{ current: boolean | null; installed: number }>(INSTALLED_SQL);
  if (row?.current === true && row.installed === TRIGGER_NAMES.length) return;
  await underLock(
    sql,
    `${TRIGGERS_SQL}\nCOMMENT ON FUNCTION "api_cache_announce"(text, jsonb) IS '${TRIGGERS_VERSION}';`,
  );
}

/** Removes them, when they are there: a server reading the replication stream needs none. */
export async function removeTriggers(sql: SqlDriver): Promise<boolean> {
  const [row] = await sql.query<{ installed: number }>(COUNT_TRIGGERS_SQL);
  if (!row || row.installed === 0) return false;
  await underLock(sql, REMOVE_SQL);
  return true;
}

/**
 * The embedded database: its thread reads the announcements out of every answer it sends, whichever
 * client it goes to (`embedded-worker.ts`), so a change made on the socket reaches the caches too.
 */
export class SessionChangeFeed extends BaseFeed {
  private listening = false;
  private closed = false;
  private readonly ready: Promise<void>;
  private readonly firstAttempt: Promise<void>;
  private readonly onNotification = (payload: string, channel: string) => {
    if (this.listening && channel === CHANGE_CHANNEL) this.emit(payload);
  };

  /** `barrier` resolves once every announcement the thread read so far has been handed over. */
  constructor(
    sql: SqlDriver,
    private readonly session: EventEmitter,
    private readonly barrier: () => Promise<void> = async () => {},
  ) {
    super();
    session.on('notification', this.onNotification);
    let attempted = () => {};
    this.firstAttempt = new Promise((resolve) => (attempted = resolve));
    this.ready = (async () => {
      // Until the tables exist (a database not migrated yet) and the triggers are in, not live.
      for (let failures = 0; !this.closed; failures += 1) {
        if (failures === 1) attempted();
        try {
          await installTriggers(sql);
          // The session's LISTEN makes it send the announcements; the thread reads them whoever asked.
          await sql.exec(`LISTEN ${CHANGE_CHANNEL}`);
          break;
        } catch {
          await new Promise((resolve) => setTimeout(resolve, retryDelay(failures)).unref());
        }
      }
      attempted();
      if (this.closed) return;
      this.listening = true;
      this.reset();
    })();
  }

  get live(): boolean {
    return this.listening;
  }

  /** Resolves once listening, or once its first attempt failed (it goes on trying). */
  async started(): Promise<void> {
    await this.firstAttempt;
  }

  /** A statement committed before the call sent its announcements before its answer: the thread has them. */
  async caughtUp(timeoutMs = 5000): Promise<void> {
    await timeBound(
      this.ready.then(() => this.barrier()),
      timeoutMs,
      'the embedded database did not hand over its announcements',
    );
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.ready.catch(() => {});
    this.listening = false;
    this.session.off('notification', this.onNotification);
  }
}

export type NotifyFeedOptions = {
  connection: pg.ClientConfig;
  /** How often the listening connection is checked. */
  heartbeatMs?: number;
  /** Not live when no check has succeeded for this long (a connection that died silently). */
  staleAfterMs?: number;
  /** A check unanswered for this long ends the connection, and a new one is opened. */
  heartbeatTimeoutMs?: number;
  connectTimeoutMs?: number;
  onStateChange?: (live: boolean, error?: unknown) => void;
  /** Installs the triggers before listening (absent: they are expected to be there). */
  install?: () => Promise<void>;
};

/**
 * PostgreSQL without logical replication: a connection that LISTENs. A check answered at T proves
 * every change committed before T was delivered, and counts the triggers too.
 */
export class NotifyChangeFeed extends BaseFeed implements ChangeFeed {
  private client: pg.Client | undefined;
  private confirmedAt = 0;
  private closed = false;
  private readonly heartbeatMs: number;
  private readonly staleAfterMs: number;
  private readonly heartbeatTimeoutMs: number;
  /** The connection whose check is in flight: one at a time, never one queued behind another. */
  private checking: pg.Client | undefined;
  private heartbeat: NodeJS.Timeout | undefined;
  private reconnect: NodeJS.Timeout | undefined;
  private connecting: Promise<void> | undefined;
  private attempt: pg.Client | undefined;
  private failures = 0;

  constructor(private readonly options: NotifyFeedOptions) {
    super();
    ({
      heartbeatMs: this.heartbeatMs,
      staleAfterMs: this.staleAfterMs,
      heartbeatTimeoutMs: this.heartbeatTimeoutMs,
    } = feedTiming(options));
    this.connecting = this.connect();
  }

  get live(): boolean {
    return this.client !== undefined && Date.now() - this.confirmedAt < this.staleAfterMs;
  }

  async started(): Promise<void> {
    await this.connecting;
  }

  /** Notifications pending for the session arrive before the answer to its next query. */
  async caughtUp(timeoutMs = 5000): Promise<void> {
    const client = this.client;
    if (!client) throw new Error('the change listener is not connected');
    await timeBound(client.query('SELECT 1'), timeoutMs, 'the change listener did not answer');
  }

  private async connect(): Promise<void> {
    if (this.closed) return;
    const client = new pg.Client({
      ...this.options.connection,
      keepAlive: true,
      connectionTimeoutMillis: this.options.connectTimeoutMs ?? 2000,
      application_name: 'api-cache-listener',
    });
    this.attempt = client;
    client.on('notification', (message) => {
      if (message.channel === CHANGE_CHANNEL && message.payload !== undefined) this.emit(message.payload);
    });
    client.on('error', (error) => this.lost(client, error));
    client.on('end', () => this.lost(client));
    try {
      await this.options.install?.();
      await client.connect();
      const sentAt = Date.now();
      await client.query(`LISTEN ${CHANGE_CHANNEL}`);
      if (this.closed || this.attempt !== client) {
        await client.end().catch(() => {});
        return;
      }
      this.attempt = undefined;
      this.client = client;
      this.confirmedAt = sentAt;
      this.failures = 0;
      // Whatever was cached before this connection may have missed changes.
      this.reset();
      this.options.onStateChange?.(true);
      this.heartbeat = setInterval(() => void this.check(client), this.heartbeatMs);
      this.heartbeat.unref();
    } catch (error) {
      this.lost(client, error);
    } finally {
      this.connecting = undefined;
    }
  }

  /** One check at a time; past its bound the connection is given up and replaced. */
  private async check(client: pg.Client): Promise<void> {
    if (this.checking === client) return;
    this.checking = client;
    const sentAt = Date.now();
    const bound = setTimeout(
      () =>
        this.lost(
          client,
          new Error(`the change listener's check was not answered within ${this.heartbeatTimeoutMs} ms`),
        ),
      this.heartbeatTimeoutMs,
    );
    bound.unref();
    try {
      const { rows } = await client.query<{ installed: number }>(COUNT_TRIGGERS_SQL);
      if (client !== this.client) return;
      if (rows[0]?.installed === TRIGGER_NAMES.length) this.confirmedAt = sentAt;
      // Removed by a server that reads the replication stream: listen again, installing them again.
      else this.lost(client, new Error('the announcement triggers were removed'));
    } catch (error) {
      this.lost(client, error);
    } finally {
      clearTimeout(bound);
      if (this.checking === client) this.checking = undefined;
    }
  }

  private lost(client: pg.Client, error?: unknown): void {
    client.removeAllListeners('notification');
    client.on('error', () => {});
    void client.end().catch(() => {});
    if (client === this.client) {
      this.client = undefined;
      if (this.heartbeat) clearInterval(this.heartbeat);
      this.heartbeat = undefined;
      this.reset();
      this.options.onStateChange?.(false, error);
    } else if (client === this.attempt) {
      this.attempt = undefined;
      // The first failed attempt is said (a role that may not install the triggers, say).
      if (this.failures === 0 && !this.closed) this.options.onStateChange?.(false, error);
    } else {
      return;
    }
    if (this.closed || this.reconnect) return;
    this.failures += 1;
    this.reconnect = retryLater(this.failures, () => {
      this.reconnect = undefined;
      this.connecting = this.connect();
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.heartbeat) clearInterval(this.heartbeat);
    if (this.reconnect) clearTimeout(this.reconnect);
    await this.connecting?.catch(() => {});
    const client = this.client;
    this.client = undefined;
    await client?.end().catch(() => {});
  }
}
