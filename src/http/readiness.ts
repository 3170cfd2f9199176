import type { Database } from '../db/database.js';
import { readMigrations } from '../db/migrator.js';

export type ReadinessState =
  | { ready: true }
  | { ready: false; reason: 'draining' | 'low on memory' | 'database unavailable' | 'migrations pending' };

/** How long one check's answer is reused: probes from many balancers cost one query a second. */
const REUSE_MS = 1000;

/**
 * Whether this instance should receive traffic (`GET /readyz`): not draining, the database
 * answering within a short bound, and every migration of this build applied. One check runs at
 * a time and its answer serves every probe for a second, so probes cannot load the database.
 */
export class Readiness {
  private draining = false;
  private last: { at: number; state: ReadinessState } | undefined;
  private running: Promise<ReadinessState> | undefined;
  private readonly migrations: string[];

  constructor(
    private readonly database: Database,
    private readonly timeoutMs: number,
    /** Whether the process refuses requests for memory (`ops/memory-pressure.ts`). */
    private readonly shedding: () => boolean = () => false,
  ) {
    this.migrations = readMigrations().map((migration) => migration.name);
  }

  /** From now on not ready: load balancers stop sending while in-flight work finishes. */
  drain(): void {
    this.draining = true;
  }

  async state(): Promise<ReadinessState> {
    if (this.draining) return { ready: false, reason: 'draining' };
    if (this.shedding()) return { ready: false, reason: 'low on memory' };
    if (this.last && Date.now() - this.last.at < REUSE_MS) return this.last.state;
    this.running ??= this.check().then((state) => {
      this.last = { at: Date.now(), state };
      this.running = undefined;
      return state;
    });
    const state = await this.running;
    return this.draining ? { ready: false, reason: 'draining' } : state;
  }

  private async check(): Promise<ReadinessState> {
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<'timeout'>((resolve) => {
      timer = setTimeout(() => resolve('timeout'), this.timeoutMs);
    });
    try {
      const applied = await Promise.race([
        this.database.sql.query<{ migration_name: string }>(
          `SELECT migration_name FROM "_prisma_migrations" WHERE finished_at IS NOT NULL AND rolled_back_at IS NULL`,
        ),
        timedOut,
      ]);
      if (applied === 'timeout') return { ready: false, reason: 'database unavailable' };
      const names = new Set(applied.map((row) => row.migration_name));
      return this.migrations.every((name) => names.has(name))
        ? { ready: true }
        : { ready: false, reason: 'migrations pending' };
    } catch (error) {
      // No bookkeeping table yet: nothing has been migrated.
      if ((error as { code?: string }).code === '42P01') return { ready: false, reason: 'migrations pending' };
      return { ready: false, reason: 'database unavailable' };
    } finally {
      clearTimeout(timer);
    }
  }
}
