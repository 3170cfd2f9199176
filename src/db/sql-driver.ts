/* The plain-SQL driver's shape, below the database that builds it and the change capture that uses it. */

/**
 * Plain SQL beside Prisma: migrations, locks, bulk loads, and the child list's hand-tuned keyset
 * and counting queries (the one hot path that always reaches the database).
 */
export interface SqlDriver {
  readonly kind: 'pglite' | 'postgres';
  /** Runs a script of one or more statements, without parameters. */
  exec(script: string): Promise<void>;
  query<T extends Record<string, unknown>>(text: string, params?: unknown[]): Promise<T[]>;
  /** Runs `work` on one dedicated connection (session locks, explicit transactions). */
  withConnection<T>(work: (connection: SqlConnection) => Promise<T>): Promise<T>;
  /**
   * Runs `work` on a connection of its own, outside the pool and without the requests' time
   * limits (statement and client-side query timeouts): migrations, which may wait for another
   * instance's lock and rewrite large tables. The caller sets the bounds it needs.
   */
  withSession<T>(work: (connection: SqlConnection) => Promise<T>): Promise<T>;
}

export interface SqlConnection {
  exec(script: string): Promise<void>;
  query<T extends Record<string, unknown>>(text: string, params?: unknown[]): Promise<T[]>;
}
