import { parseChange, type Change } from './changes.js';

/* The database's committed changes as the caches hear them, from logical replication or triggers (`select.ts`). */

export type ChangeListener = {
  /** One committed change, made once for every listener. */
  change(change: Change): void;
  /** Changes may have been missed (the source went down or came back): start again from nothing. */
  reset(): void;
};

/** The committed changes; `live` only while every change committed up to a moment ago was delivered. */
export interface ChangeFeed {
  readonly live: boolean;
  /** Which source delivers the changes, for `/health` and the logs. */
  readonly source: 'logical' | 'triggers' | 'none';
  /** Resolves once the first attempt to listen has ended, live or not. */
  started(): Promise<void>;
  /** Resolves once every change committed before the call reached the listeners; rejects past `timeoutMs`. */
  caughtUp(timeoutMs?: number): Promise<void>;
  subscribe(listener: ChangeListener): () => void;
  close(): Promise<void>;
}

export abstract class BaseFeed implements ChangeFeed {
  private readonly listeners = new Set<ChangeListener>();
  abstract readonly live: boolean;
  readonly source: ChangeFeed['source'] = 'triggers';
  abstract started(): Promise<void>;
  abstract caughtUp(timeoutMs?: number): Promise<void>;

  subscribe(listener: ChangeListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** One announcement of the triggers, parsed once. */
  protected emit(payload: string): void {
    if (this.listeners.size === 0) return;
    this.emitChange(parseChange(payload));
  }

  protected emitChange(change: Change): void {
    for (const listener of this.listeners) listener.change(change);
  }

  protected reset(): void {
    for (const listener of this.listeners) listener.reset();
  }

  abstract close(): Promise<void>;
}

/** `work`, or a rejection naming `what` past `timeoutMs`. */
export function timeBound<T>(work: Promise<T>, timeoutMs: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} within ${timeoutMs} ms`)), timeoutMs);
  });
  return Promise.race([work, bound]).finally(() => clearTimeout(timer));
}

/** The sources' checks: how often, when a silent source stops being live, and when its connections are replaced. */
export type FeedTiming = { heartbeatMs: number; staleAfterMs: number; heartbeatTimeoutMs: number };
export function feedTiming(options: Partial<FeedTiming>): FeedTiming {
  return {
    heartbeatMs: options.heartbeatMs ?? 500,
    staleAfterMs: options.staleAfterMs ?? 2000,
    heartbeatTimeoutMs: options.heartbeatTimeoutMs ?? 5000,
  };
}

/** The wait before the next attempt: 200 ms doubling to 5 s, half of it random, so instances do not return together. */
export function retryDelay(failures: number, random: () => number = Math.random): number {
  const ceiling = Math.min(100 * 2 ** Math.min(failures, 6), 5000);
  return ceiling / 2 + random() * (ceiling / 2);
}

/** `attempt` once, after `retryDelay(failures)`, on a timer that does not keep the process alive. */
export function retryLater(failures: number, attempt: () => void): NodeJS.Timeout {
  return setTimeout(attempt, retryDelay(failures)).unref();
}
