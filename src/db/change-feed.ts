import type { EventEmitter } from 'node:events';
import pg from 'pg';
import { parseChange, type Change } from './changes.js';

/** The channel the database's triggers announce changes on (migration change_notifications). */
export const CHANGE_CHANNEL = 'api_cache';

export type ChangeListener = {
  /** One announced change, parsed once for every listener. */
  change(change: Change): void;
  /** Notifications may have been missed (the listening connection went down or came back). */
  reset(): void;
};

/**
 * The database's change announcements. `live` is true only while every change committed up to
 * a moment ago is known to have been delivered: a cache may serve entries only then.
 */
export interface ChangeFeed {
  readonly live: boolean;
  /** Resolves once the first attempt to listen has ended, live or not. */
  started(): Promise<void>;
  subscribe(listener: ChangeListener): () => void;
  close(): Promise<void>;
}

abstract class BaseFeed implements ChangeFeed {
  private readonly listeners = new Set<ChangeListener>();
  abstract readonly live: boolean;
  abstract started(): Promise<void>;

  subscribe(listener: ChangeListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  protected emit(payload: string): void {
    if (this.listeners.size === 0) return;
    const change = parseChange(payload);
    for (const listener of this.listeners) listener.change(change);
  }

  protected reset(): void {
    for (const listener of this.listeners) listener.reset();
  }

  abstract close(): Promise<void>;
}

/**
 * The embedded database: one session behind a pool of one connection. LISTEN there once, and every
 * change is announced in the answer to the statement that made it, on the connection that sent
 * it, before that statement's promise settles. A connection closed while a statement was still
 * running (one the pool gave up on) may take an announcement with it: listeners are reset then.
 */
export class SessionChangeFeed extends BaseFeed {
  /** Feeds listening on each session: LISTEN is the session's, so the last one to close ends it. */
  private static readonly onSession = new WeakMap<EventEmitter, number>();
  private listening = false;
  private closed = false;
  private readonly ready: Promise<void>;
  private readonly onNotification = (message: pg.Notification) => {
    if (message.channel === CHANGE_CHANNEL && message.payload !== undefined && this.listening) this.emit(message.payload);
  };
  private readonly onLost = () => {
    if (this.listening) this.reset();
  };

  /** `session` emits each connection's `notification`s, and `lost` when a connection is discarded. */
  constructor(
    private readonly pool: pg.Pool,
    private readonly session: EventEmitter,
  ) {
    super();
    session.on('notification', this.onNotification);
    session.on('lost', this.onLost);
    SessionChangeFeed.onSession.set(session, (SessionChangeFeed.onSession.get(session) ?? 0) + 1);
    this.ready = pool.query(`LISTEN ${CHANGE_CHANNEL}`).then(() => {
      if (this.closed) return;
      this.listening = true;
      this.reset();
    });
  }

  get live(): boolean {
    return this.listening;
  }

  async started(): Promise<void> {
    await this.ready.catch(() => {});
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.ready.catch(() => {});
    this.listening = false;
    this.session.off('notification', this.onNotification);
    this.session.off('lost', this.onLost);
    const others = (SessionChangeFeed.onSession.get(this.session) ?? 1) - 1;
    SessionChangeFeed.onSession.set(this.session, others);
    // Another feed on the same session (a second app on one embedded database) still listens.
    if (others === 0) await this.pool.query(`UNLISTEN ${CHANGE_CHANNEL}`).catch(() => {});
  }
}

export type PostgresFeedOptions = {
  /** Where the server is: the same settings as the pool's. */
  connection: pg.ClientConfig;
  /** How often the listening connection is checked. */
  heartbeatMs?: number;
  /** Not live when no check has succeeded for this long (a connection that died silently). */
  staleAfterMs?: number;
  /** A check unanswered for this long ends the connection, and a new one is opened. */
  heartbeatTimeoutMs?: number;
  connectTimeoutMs?: number;
  onStateChange?: (live: boolean, error?: unknown) => void;
};

/**
 * PostgreSQL: a dedicated connection that LISTENs, reconnecting after a loss. The server sends a
 * session's pending notifications before the answer to its next query, so a heartbeat answered at
 * T proves that every change committed before T was delivered: without a recent answer the feed
 * is not live, even if the socket looks open.
 */
export class PostgresChangeFeed extends BaseFeed {
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
  /** The connection being opened, not yet listening. */
  private attempt: pg.Client | undefined;
  private failures = 0;

  constructor(private readonly options: PostgresFeedOptions) {
    super();
    this.heartbeatMs = options.heartbeatMs ?? 1000;
    this.staleAfterMs = options.staleAfterMs ?? 3000;
    this.heartbeatTimeoutMs = options.heartbeatTimeoutMs ?? 5000;
    this.connecting = this.connect();
  }

  get live(): boolean {
    return this.client !== undefined && Date.now() - this.confirmedAt < this.staleAfterMs;
  }

  /** Resolves once the first connection attempt has ended (live or not). */
  async started(): Promise<void> {
    await this.connecting;
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

  /**
   * One check at a time: while the last is unanswered (a frozen server, a path that drops
   * packets) no other is sent behind it; past its bound the connection is given up and replaced.
   */
  private async check(client: pg.Client): Promise<void> {
    if (this.checking === client) return;
    this.checking = client;
    const sentAt = Date.now();
    const bound = setTimeout(() => this.lost(client, new Error(`the change listener's check was not answered within ${this.heartbeatTimeoutMs} ms`)), this.heartbeatTimeoutMs);
    bound.unref();
    try {
      await client.query('SELECT 1');
      if (client === this.client) this.confirmedAt = sentAt;
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
    } else {
      return;
    }
    if (this.closed || this.reconnect) return;
    this.failures += 1;
    const delay = Math.min(100 * 2 ** Math.min(this.failures, 6), 5000);
    this.reconnect = setTimeout(() => {
      this.reconnect = undefined;
      this.connecting = this.connect();
    }, delay);
    this.reconnect.unref();
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
