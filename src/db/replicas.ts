import pg from 'pg';
import { boundedPool, boundedReadSettings, redactUrl, type BoundedReadOptions, type BoundedReads } from './database.js';

/*
 * Streaming replicas (DATABASE_REPLICA_URL) for the reads that tolerate bounded staleness: the child
 * list's uncached pages. What fills the entity cache stays on the primary. Staleness is measured: a
 * replica that has replayed the primary's WAL position of time t is at most now - t old; one past
 * REPLICA_MAX_LAG_MS, silent or failing is skipped for the primary. No request fails for a replica.
 */

export type ReplicaState = { name: string; usable: boolean; lagMs: number | undefined; problem?: string };

type Member = {
  name: string;
  url: string;
  pool: pg.Pool;
  usable: boolean;
  lagMs: number | undefined;
  problem?: string;
};

export type ReadQuery = { query<T extends Record<string, unknown>>(text: string, params?: unknown[]): Promise<T[]> };

/** `X/Y` (hex halves of a 64-bit WAL position) as a number of bytes. */
function lsn(text: string): bigint {
  const [high, low] = text.split('/');
  return (BigInt(`0x${high}`) << 32n) + BigInt(`0x${low}`);
}

export class Replicas {
  private readonly members: Member[];
  /** The primary's WAL position over the last moments: when it was at least where. */
  private samples: { at: number; position: bigint }[] = [];
  private turn = 0;
  private timer: NodeJS.Timeout | undefined;
  private checking: Promise<void> | undefined;
  readonly reads = { replica: 0, primary: 0 };

  constructor(
    urls: string[],
    private readonly primary: pg.Pool,
    private readonly options: {
      maxLagMs: number;
      statementTimeoutMs: number;
      connectTimeoutMs: number;
      poolSize: number;
      checkEveryMs?: number;
    },
  ) {
    this.members = urls.map((url) => {
      const pool = boundedPool(
        { connectionString: url },
        {
          max: options.poolSize,
          connectTimeoutMs: options.connectTimeoutMs,
          statementTimeoutMs: options.statementTimeoutMs,
          applicationName: 'credits-read-api-replica-reads',
        },
      );
      return { name: redactUrl(url), url, pool, usable: false, lagMs: undefined, problem: 'not checked yet' };
    });
  }

  /** Checks now and then every `checkEveryMs`: one check at a time. */
  async start(): Promise<void> {
    await this.check();
    this.timer = setInterval(() => {
      this.checking ??= this.check().finally(() => (this.checking = undefined));
    }, this.options.checkEveryMs ?? 250);
    this.timer.unref();
  }

  get state(): ReplicaState[] {
    return this.members.map(({ name, usable, lagMs, problem }) => ({
      name,
      usable,
      lagMs,
      ...(problem ? { problem } : {}),
    }));
  }

  /** A reader for reads that tolerate REPLICA_MAX_LAG_MS of staleness: a usable replica, else the primary. */
  readonly reader: ReadQuery = this.readerOver(
    (member) => member.pool,
    async (text, params) => (await this.primary.query(text, params)).rows,
  );

  /** `reader` for statements with a time bound of their own (searches), else `primary`. */
  boundedReader(options: BoundedReadOptions, primary: BoundedReads): BoundedReads {
    const pools = new Map(
      this.members.map((member) => {
        const pool = boundedPool(
          { connectionString: member.url },
          {
            max: options.poolSize,
            connectTimeoutMs: this.options.connectTimeoutMs,
            statementTimeoutMs: options.timeoutMs,
            applicationName: 'credits-read-api-replica-searches',
            settings: boundedReadSettings(options.serial),
          },
        );
        return [member, pool] as const;
      }),
    );
    return {
      query: this.readerOver((member) => pools.get(member)!, primary.query).query,
      close: async () => {
        await Promise.all([...pools.values()].map((pool) => pool.end().catch(() => {})));
      },
    };
  }

  /** Reads on a usable replica (its pool as `poolOf` says), else with `onPrimary`. */
  private readerOver(
    poolOf: (member: Member) => pg.Pool,
    onPrimary: <T extends Record<string, unknown>>(text: string, params: unknown[]) => Promise<T[]>,
  ): ReadQuery {
    return {
      query: async <T extends Record<string, unknown>>(text: string, params: unknown[] = []): Promise<T[]> => {
        const usable = this.members.filter((member) => member.usable);
        if (usable.length > 0) {
          const member = usable[this.turn++ % usable.length]!;
          try {
            const rows = (await poolOf(member).query<T>(text, params)).rows;
            this.reads.replica += 1;
            return rows;
          } catch (error) {
            // A timeout or refused input would fail on the primary too: the caller's. Anything else is
            // read again on the primary.
            const code = (error as { code?: string }).code;
            if (code?.startsWith('22') || code === '57014') throw error;
            member.usable = false;
            member.problem = (error as Error).message;
          }
        }
        this.reads.primary += 1;
        return onPrimary<T>(text, params);
      },
    };
  }

  private async check(): Promise<void> {
    const now = Date.now();
    try {
      const { rows } = await this.primary.query<{ position: string }>('SELECT pg_current_wal_lsn()::text AS position');
      this.samples.push({ at: now, position: lsn(rows[0]!.position) });
    } catch {
      // The primary is the requests' problem, not this check's: the replicas keep their state.
      return;
    }
    // Enough history to measure a lag past the bound, not more.
    const horizon = now - Math.max(this.options.maxLagMs * 4, 5000);
    while (this.samples.length > 1 && this.samples[0]!.at < horizon) this.samples.shift();
    await Promise.all(this.members.map((member) => this.measure(member)));
  }

  private async measure(member: Member): Promise<void> {
    try {
      const { rows } = await member.pool.query<{ replayed: string | null; standby: boolean }>(
        'SELECT pg_last_wal_replay_lsn()::text AS replayed, pg_is_in_recovery() AS standby',
      );
      const { replayed, standby } = rows[0]!;
      if (!standby || replayed === null) {
        Object.assign(member, {
          usable: false,
          lagMs: undefined,
          problem: 'not a streaming replica (pg_is_in_recovery() is false)',
        });
        return;
      }
      const position = lsn(replayed);
      // The newest moment at which the primary had written no more than the replica has replayed.
      let caughtUpAt: number | undefined;
      for (const sample of this.samples) if (sample.position <= position) caughtUpAt = sample.at;
      const lagMs = caughtUpAt === undefined ? undefined : Math.max(0, Date.now() - caughtUpAt);
      const usable = lagMs !== undefined && lagMs <= this.options.maxLagMs;
      Object.assign(member, {
        usable,
        lagMs,
        problem: usable ? undefined : `replication lag over ${this.options.maxLagMs} ms`,
      });
    } catch (error) {
      Object.assign(member, { usable: false, lagMs: undefined, problem: (error as Error).message });
    }
  }

  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.checking;
    await Promise.all(this.members.map((member) => member.pool.end().catch(() => {})));
  }
}
