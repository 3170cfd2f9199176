import { randomBytes, timingSafeEqual } from 'node:crypto';
import http from 'node:http';
import pg from 'pg';
import type { Change } from './changes.js';
import { BaseFeed, feedTiming, within, type FeedTiming } from './feed.js';
import { LogicalChangeFeed, type LogicalFeedOptions } from './logical.js';

/*
 * One replication stream for every instance. Each stream costs the primary a walsender that
 * decodes every change of every writer (measured: about 0.1 ms of the primary's CPU a sign-in
 * each), so with several instances one of them reads the stream and relays the decoded changes to
 * the others over HTTP. The reader is whoever holds a PostgreSQL advisory lock on a connection of
 * its own; that connection's application_name says where its relay listens and the token it
 * asks for, so the others find it there. When the reader goes (exits, is killed, loses its lock
 * connection), the lock goes with its session and another instance takes it and opens a stream of
 * its own; every follower starts again from nothing (its caches are emptied), as after any
 * reconnection. A follower is live while the reader's stream is live and its beats arrive.
 */

/** The advisory lock of the reader (the triggers' installation uses 72707370). */
export const RELAY_LOCK = 72_707_371;
/** How the reader names its lock connection: the prefix, then its token and its relay's address. */
const NAME_PREFIX = 'api_relay';
/** The token's length: 16 base64url characters, 96 random bits. */
const TOKEN_LENGTH = 16;
/** application_name holds 63 bytes. */
const MAX_NAME = 63;
/** A follower that lets this much pile up unread is cut off (it reconnects and starts again). */
const MAX_BUFFERED_BYTES = 4 * 1024 * 1024;
/** No line the reader sends is longer. */
const MAX_LINE_BYTES = 1024 * 1024;

export type RelayOptions = LogicalFeedOptions & {
  /** How the other instances reach this one's relay: http://host:port (CHANGE_RELAY_URL). */
  url: string;
  /** The address the relay listens on, default every interface (CHANGE_RELAY_HOST). */
  host?: string;
};

/** One line of the relay: a change, a reset, a beat with the reader's state, a catch-up mark. */
type Line = { c: Change } | { r: 1 } | { b: 1; live: boolean } | { m: string };

type Leading = {
  feed: LogicalChangeFeed;
  server: http.Server;
  token: string;
  streams: Set<http.ServerResponse>;
  beat: NodeJS.Timeout;
};

type Following = {
  request: http.ClientRequest;
  url: string;
  token: string;
  beatAt: number;
  readerLive: boolean;
  marks: Map<string, () => void>;
  first: Promise<void>;
};

/** The relay's address, checked at start: an http URL with a port, short enough to be advertised. */
export function relayAddress(url: string): { url: string; port: number } {
  const parsed = new URL(url);
  if (parsed.protocol !== 'http:' || parsed.port === '' || parsed.pathname !== '/' || parsed.search !== '') {
    throw new Error(`CHANGE_RELAY_URL must be http://host:port, not ${url}`);
  }
  const origin = parsed.origin;
  const longest = MAX_NAME - NAME_PREFIX.length - TOKEN_LENGTH - 2;
  if (origin.length > longest) throw new Error(`CHANGE_RELAY_URL is too long to advertise (${origin.length} characters; at most ${longest})`);
  return { url: origin, port: Number(parsed.port) };
}

export class RelayChangeFeed extends BaseFeed {
  override readonly source = 'logical' as const;
  private readonly timing: FeedTiming;
  private readonly address: { url: string; port: number };
  private lock: pg.Client | undefined;
  private leading: Leading | undefined;
  private following: Following | undefined;
  private closed = false;
  private timer: NodeJS.Timeout | undefined;
  private readonly first: Promise<void>;
  private sequence = 0;
  /** The state last reported to `onStateChange`: reported on changes only, not on every retry. */
  private reported = false;

  constructor(private readonly options: RelayOptions) {
    super();
    this.timing = feedTiming(options);
    this.address = relayAddress(options.url);
    this.first = this.cycle();
  }

  /** Whether this instance reads the stream (and relays it), for `/health` and the tests. */
  get relay(): 'reader' | 'follower' | 'none' {
    return this.leading ? 'reader' : this.following ? 'follower' : 'none';
  }

  get live(): boolean {
    if (this.leading) return this.leading.feed.live;
    const following = this.following;
    return following !== undefined && following.readerLive && Date.now() - following.beatAt < this.timing.staleAfterMs;
  }

  async started(): Promise<void> {
    await this.first;
  }

  /** Tried again until `timeoutMs` runs out: a reader may go, and another take over, meanwhile. */
  async caughtUp(timeoutMs = 5000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    await within(this.first, timeoutMs, 'the change relay did not start');
    for (;;) {
      try {
        // Between a reader's going and the next one's first beat: wait for either role.
        while (!this.leading && !(this.following && this.following.beatAt > 0)) {
          if (this.closed || Date.now() >= deadline) throw new Error('no change relay is read or followed');
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
        const left = Math.max(1, deadline - Date.now());
        return await (this.leading ? this.leading.feed.caughtUp(left) : this.followerCaughtUp(this.following!, left));
      } catch (error) {
        if (this.closed || Date.now() + 50 >= deadline) throw error;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    }
  }

  private async followerCaughtUp(following: Following, timeoutMs: number): Promise<void> {
    // The reader catches up, then sends the mark down this follower's stream after every change before it.
    const mark = `${process.pid}.${++this.sequence}`;
    const arrived = new Promise<void>((resolve) => following.marks.set(mark, resolve));
    try {
      await within(
        (async () => {
          const status = await request(`${following.url}/caught-up?mark=${mark}`, following.token, timeoutMs);
          if (status !== 204) throw new Error(`the change relay could not catch up (${status})`);
          await arrived;
        })(),
        timeoutMs,
        'the change relay did not catch up',
      );
    } finally {
      following.marks.delete(mark);
    }
  }

  /** One round: hold or take the lock, or follow whoever holds it; then the next round. */
  private async cycle(): Promise<void> {
    if (this.closed) return;
    try {
      const lock = await this.lockConnection();
      if (this.leading) {
        // Still holding it: a lock connection that no longer answers is a lock that may be gone.
        await within(lock.query('SELECT 1'), this.timing.heartbeatTimeoutMs, 'the relay lock connection did not answer');
      } else {
        const [row] = (await within(lock.query<{ got: boolean }>('SELECT pg_try_advisory_lock($1) AS got', [RELAY_LOCK]), this.timing.heartbeatTimeoutMs, 'the relay lock was not answered')).rows;
        if (row?.got) {
          this.unfollow();
          await this.lead(lock);
        } else if (!this.following || Date.now() - this.following.beatAt > this.timing.heartbeatTimeoutMs) {
          this.unfollow();
          await this.follow(lock);
        }
      }
    } catch (error) {
      await this.lose(error);
    }
    if (!this.closed) this.timer = setTimeout(() => void this.cycle(), this.timing.heartbeatMs).unref();
  }

  private async lockConnection(): Promise<pg.Client> {
    if (this.lock) return this.lock;
    const lock = new pg.Client({ ...this.options.connection, connectionTimeoutMillis: this.options.connectTimeoutMs ?? 5000, keepAlive: true });
    lock.on('error', () => void this.lose(new Error('the relay lock connection failed')));
    this.lock = lock;
    await lock.connect();
    // A reader cut off from the server must not hold the lock (and blind the others) for the
    // kernel's two hours: the server gives the session up within about 10 s of silence.
    await lock.query(`SELECT set_config('tcp_keepalives_idle', '5', false), set_config('tcp_keepalives_interval', '1', false),
                             set_config('tcp_keepalives_count', '5', false), set_config('tcp_user_timeout', '10000', false)`);
    return lock;
  }

  /** This instance holds the lock: it opens the stream and serves it to the others. */
  private async lead(lock: pg.Client): Promise<void> {
    const token = randomBytes((TOKEN_LENGTH * 3) / 4).toString('base64url');
    const streams = new Set<http.ServerResponse>();
    const feed = new LogicalChangeFeed({ ...this.options, onStateChange: (live, error) => this.report(live, error) });
    const send = (line: Line) => {
      const text = `${JSON.stringify(line)}\n`;
      for (const stream of streams) {
        // A follower this far behind is cut off: it reconnects and starts again from nothing.
        if (stream.writableLength > MAX_BUFFERED_BYTES) stream.destroy();
        else stream.write(text);
      }
    };
    feed.subscribe({
      change: (change) => {
        this.emitChange(change);
        send({ c: change });
      },
      reset: () => {
        this.reset();
        send({ r: 1 });
      },
    });
    const server = http.createServer((req, res) => this.serve(req, res, token, feed, streams, send));
    const beat = setInterval(() => send({ b: 1, live: feed.live }), this.timing.heartbeatMs).unref();
    this.leading = { feed, server, token, streams, beat };
    this.reset();
    try {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(this.address.port, this.options.host ?? '0.0.0.0', () => resolve());
      });
      await lock.query(`SELECT set_config('application_name', $1, false)`, [`${NAME_PREFIX} ${token} ${this.address.url}`]);
    } catch (error) {
      await this.stopLeading();
      throw error;
    }
    await feed.started();
  }

  private serve(req: http.IncomingMessage, res: http.ServerResponse, token: string, feed: LogicalChangeFeed, streams: Set<http.ServerResponse>, send: (line: Line) => void): void {
    const given = Buffer.from(/^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1] ?? '');
    const expected = Buffer.from(token);
    if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
      res.writeHead(401).end();
      return;
    }
    const url = new URL(req.url ?? '/', 'http://relay');
    if (req.method === 'GET' && url.pathname === '/changes') {
      res.writeHead(200, { 'content-type': 'application/x-ndjson', 'cache-control': 'no-store' });
      res.socket?.setNoDelay(true);
      streams.add(res);
      res.on('close', () => streams.delete(res));
      res.write(`${JSON.stringify({ b: 1, live: feed.live } satisfies Line)}\n`);
      return;
    }
    const mark = url.searchParams.get('mark');
    if (req.method === 'GET' && url.pathname === '/caught-up' && mark !== null && /^[\w.]{1,64}$/.test(mark)) {
      feed.caughtUp(this.timing.heartbeatTimeoutMs).then(
        () => {
          // Caught up: the stream is live, which the mark's follower is told first.
          send({ b: 1, live: feed.live });
          send({ m: mark });
          res.writeHead(204).end();
        },
        () => res.writeHead(503).end(),
      );
      return;
    }
    res.writeHead(404).end();
  }

  /** Someone else holds the lock: follow the relay its connection names. */
  private async follow(lock: pg.Client): Promise<void> {
    const { rows } = await within(
      lock.query<{ name: string }>(
        `SELECT a.application_name AS name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
         WHERE l.locktype = 'advisory' AND l.granted AND l.classid = 0 AND l.objid = $1 AND l.objsubid = 1
           AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
        [RELAY_LOCK],
      ),
      this.timing.heartbeatTimeoutMs,
      'the relay reader was not found',
    );
    const [prefix, token, url] = (rows[0]?.name ?? '').split(' ');
    // The reader has the lock but has not said where it listens yet: the next round looks again.
    if (prefix !== NAME_PREFIX || !token || !url) return;
    let beat: () => void = () => {};
    const following: Following = { request: undefined as unknown as http.ClientRequest, url, token, beatAt: 0, readerLive: false, marks: new Map(), first: new Promise<void>((resolve) => (beat = resolve)) };
    const lost = (error: unknown) => {
      if (this.following !== following) return;
      this.following = undefined;
      this.reset();
      this.report(false, error);
    };
    following.request = http.get(`${url}/changes`, { headers: { authorization: `Bearer ${token}` }, timeout: this.timing.heartbeatTimeoutMs }, (res) => {
      if (res.statusCode !== 200) {
        res.resume();
        lost(new Error(`the change relay answered ${res.statusCode}`));
        return;
      }
      let pending = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        pending += chunk;
        let end: number;
        while ((end = pending.indexOf('\n')) >= 0) {
          let line: Line;
          try {
            line = JSON.parse(pending.slice(0, end)) as Line;
          } catch (error) {
            following.request.destroy(error as Error);
            return;
          }
          pending = pending.slice(end + 1);
          if (this.following !== following) return;
          if ('c' in line) this.emitChange(line.c);
          else if ('r' in line) this.reset();
          else if ('m' in line) following.marks.get(line.m)?.();
          else {
            following.beatAt = Date.now();
            following.readerLive = line.live;
            this.report(this.live);
            beat();
          }
        }
        if (pending.length > MAX_LINE_BYTES) following.request.destroy(new Error('the change relay sent an overlong line'));
      });
      res.on('end', () => lost(new Error('the change relay ended the stream')));
      res.on('error', lost);
    });
    following.request.on('timeout', () => following.request.destroy(new Error('the change relay did not answer')));
    following.request.on('error', lost);
    this.following = following;
    // Whatever was cached came from before this stream: start from nothing.
    this.reset();
    await within(following.first, this.timing.heartbeatTimeoutMs, 'the change relay sent no beat').catch((error) => {
      following.request.destroy();
      lost(error);
    });
  }

  private unfollow(): void {
    const following = this.following;
    if (!following) return;
    this.following = undefined;
    following.request.destroy();
  }

  private async stopLeading(): Promise<void> {
    const leading = this.leading;
    if (!leading) return;
    this.leading = undefined;
    clearInterval(leading.beat);
    for (const stream of leading.streams) stream.destroy();
    leading.server.close();
    leading.server.closeAllConnections();
    await leading.feed.close();
  }

  /** Whatever went wrong: stop leading or following, drop the lock connection (and the lock with it). */
  private async lose(error: unknown): Promise<void> {
    const lock = this.lock;
    this.lock = undefined;
    const was = this.leading !== undefined || this.following !== undefined;
    this.unfollow();
    await this.stopLeading();
    await lock?.end().catch(() => {});
    if (was) this.reset();
    this.report(false, error);
  }

  private report(live: boolean, error?: unknown): void {
    if (live === this.reported) return;
    this.reported = live;
    this.options.onStateChange?.(live, error);
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    await this.first.catch(() => {});
    clearTimeout(this.timer);
    this.unfollow();
    await this.stopLeading();
    await this.lock?.end().catch(() => {});
    this.lock = undefined;
  }
}

/** A GET with the relay's token: its status, or a rejection past `timeoutMs`. */
function request(url: string, token: string, timeoutMs: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { headers: { authorization: `Bearer ${token}` }, timeout: timeoutMs }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('timeout', () => req.destroy(new Error('the change relay did not answer')));
    req.on('error', reject);
  });
}
