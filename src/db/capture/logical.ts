import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { LogicalReplicationService, PgoutputPlugin, type Pgoutput } from 'pg-logical-replication';
import { BaseFeed, feedTiming, retryLater, timeBound, type ChangeFeed } from './feed.js';
import { parseLsn, PgoutputDecoder, type Malformed } from './pgoutput.js';

/*
 * The logical replication feed: the committed changes of the publication `api_cache`, decoded by
 * the walsender with `pgoutput`; nothing runs in the writers' transactions. Each instance reads its
 * own temporary slot, which the server drops when the session ends, so no slot outlives its reader.
 * Freshness: each heartbeat writes a logical message into the WAL, and the feed is live while one
 * written less than `staleAfterMs` ago has come back (the stream delivers in WAL order).
 */

/** The publication the migrations create (migration change_capture). */
export const PUBLICATION = 'api_cache';
/** The prefix of the heartbeat messages this feed writes into the WAL. */
const HEARTBEAT_PREFIX = 'api_cache_heartbeat';
/** How long the server keeps a replication session (and its slot) whose reader went silent. */
export const SENDER_TIMEOUT_MS = 10_000;

export type LogicalFeedOptions = {
  /** Where the heartbeats are written: the same settings as the pool's. */
  connection: pg.ClientConfig;
  /**
   * A PostgreSQL 16+ standby to read the stream from; heartbeats are still written on the primary, so
   * staleness is bounded from the primary's COMMIT.
   */
  decodeFrom?: pg.ClientConfig;
  heartbeatMs?: number;
  /** Not live when no heartbeat written within this long has come back through the stream. */
  staleAfterMs?: number;
  /** A heartbeat not back within this long ends both connections, and new ones are opened. */
  heartbeatTimeoutMs?: number;
  connectTimeoutMs?: number;
  /** Creating a slot waits for the transactions running at that moment to end: at most this long. */
  slotTimeoutMs?: number;
  onStateChange?: (live: boolean, error?: unknown) => void;
};

type Heartbeat = { token: string; sentAt: number; back?: () => void };

/** pgoutput over a temporary slot made on the replication connection; parse failures become `Malformed`. */
export class TemporarySlotPlugin extends PgoutputPlugin {
  /** `whileCreating`: runs while the slot is being made (a standby's waits for the primary's snapshot record). */
  constructor(
    private readonly onSlotTimeout: () => void,
    private readonly slotTimeoutMs: number,
    private readonly whileCreating: () => () => void = () => () => {},
  ) {
    super({ protoVersion: 1, publicationNames: [PUBLICATION], messages: true });
  }

  /** A parsed message, or `Malformed`. */
  override parse(buffer: Buffer): Pgoutput.Message {
    try {
      return super.parse(buffer);
    } catch (error) {
      const malformed: Malformed = { tag: 'malformed', error };
      return malformed as unknown as Pgoutput.Message;
    }
  }

  override async start(client: pg.Client, slotName: string): Promise<unknown> {
    const bound = setTimeout(this.onSlotTimeout, this.slotTimeoutMs);
    const stop = this.whileCreating();
    try {
      await client.query(`CREATE_REPLICATION_SLOT "${slotName}" TEMPORARY LOGICAL pgoutput NOEXPORT_SNAPSHOT`);
    } finally {
      stop();
      clearTimeout(bound);
    }
    const { protoVersion, publicationNames, messages } = this.options;
    return client.query(
      `START_REPLICATION SLOT "${slotName}" LOGICAL 0/0 (proto_version '${protoVersion}', publication_names '${publicationNames.join(',')}', messages '${messages}', binary 'true')`,
    );
  }
}

export class LogicalChangeFeed extends BaseFeed implements ChangeFeed {
  override readonly source = 'logical' as const;
  private readonly heartbeatMs: number;
  private readonly staleAfterMs: number;
  private readonly heartbeatTimeoutMs: number;
  private readonly instance = randomBytes(6).toString('hex');
  private closed = false;
  private confirmedAt = 0;
  private streaming = false;
  /** `queue`: the heartbeat connection's statements, one at a time (pg deprecates queueing them itself). */
  private session:
    | { service: LogicalReplicationService; client: pg.Client; decoder: PgoutputDecoder; queue: Promise<unknown> }
    | undefined;
  private nextXid: bigint | undefined;
  /** The highest position the stream has reached: what is acknowledged, so the slot lets WAL go. */
  private position = 0n;
  private readonly pending: Heartbeat[] = [];
  private sequence = 0;
  private writing = false;
  private timer: NodeJS.Timeout | undefined;
  private reconnect: NodeJS.Timeout | undefined;
  private connecting: Promise<void> | undefined;
  private failures = 0;
  private generation = 0;
  private confirmed: (() => void) | undefined;

  constructor(private readonly options: LogicalFeedOptions) {
    super();
    ({
      heartbeatMs: this.heartbeatMs,
      staleAfterMs: this.staleAfterMs,
      heartbeatTimeoutMs: this.heartbeatTimeoutMs,
    } = feedTiming(options));
    this.connecting = this.connect();
  }

  get live(): boolean {
    return this.streaming && Date.now() - this.confirmedAt < this.staleAfterMs;
  }

  async started(): Promise<void> {
    await this.connecting;
  }

  /** A heartbeat written now and back through the stream: everything committed before it was delivered. */
  async caughtUp(timeoutMs = 5000): Promise<void> {
    await timeBound(this.started(), timeoutMs, 'the change stream did not start');
    const session = this.session;
    if (!session || !this.streaming) throw new Error('the change stream is not running');
    const heartbeat: Heartbeat = { token: `${this.instance}:${++this.sequence}`, sentAt: Date.now() };
    const back = new Promise<void>((resolve) => (heartbeat.back = resolve));
    this.pending.push(heartbeat);
    await timeBound(
      serially(session, () =>
        session.client.query(`SELECT pg_logical_emit_message(false, '${HEARTBEAT_PREFIX}', $1::text)`, [
          heartbeat.token,
        ]),
      ).then(() => back),
      timeoutMs,
      'the change stream did not deliver a heartbeat',
    );
  }

  private async connect(): Promise<void> {
    if (this.closed) return;
    const generation = ++this.generation;
    const connectTimeoutMs = this.options.connectTimeoutMs ?? 2000;
    const client = new pg.Client({
      ...this.options.connection,
      keepAlive: true,
      connectionTimeoutMillis: connectTimeoutMs,
      application_name: 'api-cache-heartbeat',
    });
    client.on('error', (error) => this.lost(generation, error));
    client.on('end', () => this.lost(generation, new Error('the heartbeat connection ended')));
    const decoder = new PgoutputDecoder(() => this.nextXid);
    const decodeFrom = this.options.decodeFrom ?? this.options.connection;
    const service = new LogicalReplicationService(
      {
        ...decodeFrom,
        keepAlive: true,
        connectionTimeoutMillis: connectTimeoutMs,
        application_name: 'api-cache-stream',
        // The server ends the session (and drops its slot) when this reader stops answering.
        options: `${decodeFrom.options ?? ''} -c wal_sender_timeout=${SENDER_TIMEOUT_MS}`.trim(),
      },
      // Acknowledged once a heartbeat, not once a message: every reply costs the walsender work.
      { acknowledge: { auto: false, timeoutSeconds: 0 } },
    );
    this.session = { service, client, decoder, queue: Promise.resolve() };
    service.on('error', (error: Error) => this.lost(generation, error));
    service.on('data', (_lsn: string, message: Pgoutput.Message | Malformed) =>
      this.receive(generation, decoder, message),
    );
    service.on('heartbeat', (lsn: string, _time: number, shouldRespond: boolean) => {
      this.advance(parseLsn(lsn));
      if (shouldRespond) void service.acknowledge(formatLsn(this.position));
    });
    service.on('start', () => {
      if (generation !== this.generation) return;
      this.streaming = true;
      this.failures = 0;
      // Whatever was cached before this stream may have missed changes; live at the first heartbeat back.
      this.reset();
      this.timer = setInterval(() => void this.beat(generation), this.heartbeatMs);
      this.timer.unref();
      void this.beat(generation);
    });
    try {
      await client.connect();
      await this.readNextXid(client);
      const plugin = new TemporarySlotPlugin(
        () =>
          this.lost(
            generation,
            new Error(
              `no replication slot within ${this.options.slotTimeoutMs ?? 30_000} ms: a long transaction is running`,
            ),
          ),
        this.options.slotTimeoutMs ?? 30_000,
        this.options.decodeFrom ? () => this.nudgeStandby(generation) : undefined,
      );
      const slot = `api_cache_${this.instance}_${generation}`;
      // Resolves when the stream ends: not awaited past its start.
      const subscribed = service.subscribe(plugin, slot);
      subscribed.then(
        () => this.lost(generation, new Error('the replication stream ended')),
        (error: unknown) => this.lost(generation, error),
      );
      // Started once the first heartbeat is back (live), or the attempt failed, or its bound passed.
      const ended = subscribed.then(
        () => {},
        () => {},
      );
      await Promise.race([
        new Promise<void>((resolve) => (this.confirmed = resolve)),
        ended,
        delay(this.heartbeatTimeoutMs + (this.options.slotTimeoutMs ?? 30_000)),
      ]);
      this.confirmed = undefined;
    } catch (error) {
      this.lost(generation, error);
    } finally {
      this.connecting = undefined;
    }
  }

  /**
   * A standby's slot waits for a record of the primary's running transactions: asked for every 250 ms
   * until the slot exists (`pg_log_standby_snapshot`, PostgreSQL 16).
   */
  private nudgeStandby(generation: number): () => void {
    let allowed = true;
    const nudge = () => {
      const session = this.session;
      if (!allowed || !session || generation !== this.generation) return;
      serially(session, () => session.client.query('SELECT pg_log_standby_snapshot()')).catch(() => (allowed = false));
    };
    nudge();
    const timer = setInterval(nudge, 250).unref();
    return () => clearInterval(timer);
  }

  private async readNextXid(client: pg.Client): Promise<void> {
    const { rows } = await client.query<{ next: string }>(
      `SELECT pg_snapshot_xmax(pg_current_snapshot())::text AS next`,
    );
    if (rows[0]) this.nextXid = BigInt(rows[0].next);
  }

  private receive(generation: number, decoder: PgoutputDecoder, message: Pgoutput.Message | Malformed): void {
    if (generation !== this.generation) return;
    const event = decoder.decode(message);
    if (event.kind === 'commit') {
      for (const change of event.changes) this.emitChange(change);
      this.advance(event.endLsn);
    } else if (event.kind === 'message') {
      this.advance(event.lsn);
      if (event.prefix !== HEARTBEAT_PREFIX) return;
      const index = this.pending.findIndex((heartbeat) => heartbeat.token === event.content);
      if (index < 0) return;
      // This heartbeat and every earlier one are back: all written before it was delivered.
      const first = this.confirmedAt === 0;
      this.confirmedAt = Math.max(this.confirmedAt, this.pending[index]!.sentAt);
      for (const heartbeat of this.pending.splice(0, index + 1)) heartbeat.back?.();
      if (first) {
        this.confirmed?.();
        this.options.onStateChange?.(true);
      }
    }
  }

  private advance(lsn: bigint): void {
    if (lsn > this.position) this.position = lsn;
  }

  /**
   * One heartbeat, never queued behind an unanswered one; the connections are given up when an earlier
   * one has not come back within its bound.
   */
  private async beat(generation: number): Promise<void> {
    const session = this.session;
    if (!session || generation !== this.generation || !this.streaming) return;
    const oldest = this.pending[0];
    if (oldest && Date.now() - oldest.sentAt > this.heartbeatTimeoutMs) {
      this.lost(
        generation,
        new Error(`the change stream's heartbeat did not come back within ${this.heartbeatTimeoutMs} ms`),
      );
      return;
    }
    if (this.position > 0n) void session.service.acknowledge(formatLsn(this.position));
    if (this.writing) return;
    this.writing = true;
    const heartbeat = { token: `${this.instance}:${++this.sequence}`, sentAt: Date.now() };
    // At most a few outstanding: a stream that stopped delivering fails the bound above first.
    this.pending.push(heartbeat);
    if (this.pending.length > 64) this.pending.shift();
    try {
      const { rows } = await serially(session, () =>
        session.client.query<{ next: string }>(
          `SELECT pg_logical_emit_message(false, '${HEARTBEAT_PREFIX}', $1::text)::text AS lsn, pg_snapshot_xmax(pg_current_snapshot())::text AS next`,
          [heartbeat.token],
        ),
      );
      if (rows[0]) this.nextXid = BigInt(rows[0].next);
    } catch (error) {
      this.lost(generation, error);
    } finally {
      this.writing = false;
    }
  }

  private lost(generation: number, error?: unknown): void {
    if (generation !== this.generation) return;
    this.generation += 1;
    const session = this.session;
    this.session = undefined;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    this.pending.length = 0;
    this.writing = false;
    const wasStreaming = this.streaming;
    this.streaming = false;
    this.confirmedAt = 0;
    if (session) {
      session.client.removeAllListeners('end');
      session.client.on('error', () => {});
      void session.client.end().catch(() => {});
      void session.service.destroy().catch(() => {});
    }
    if (wasStreaming) {
      this.reset();
      if (!this.closed) this.options.onStateChange?.(false, error);
    }
    if (this.closed || this.reconnect) return;
    this.failures += 1;
    this.reconnect = retryLater(this.failures, () => {
      this.reconnect = undefined;
      this.connecting = this.connect();
    });
    if (!wasStreaming && this.failures === 1) this.options.onStateChange?.(false, error);
  }

  /** Ends the connections first: an attempt still waiting for its slot ends with them, not after its bound. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.reconnect) clearTimeout(this.reconnect);
    this.lost(this.generation);
    await this.connecting?.catch(() => {});
  }
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}

function formatLsn(lsn: bigint): string {
  return `${(lsn >> 32n).toString(16).toUpperCase()}/${(lsn & 0xffffffffn).toString(16).toUpperCase()}`;
}

/** `work` once the session's earlier statements have ended. */
function serially<T>(session: { queue: Promise<unknown> }, work: () => Promise<T>): Promise<T> {
  const next = session.queue.then(work, work);
  session.queue = next.catch(() => {});
  return next;
}
