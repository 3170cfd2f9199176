import type { ChangeFeed, ChangeListener } from '../../src/db/capture/feed.js';
import { parseChange } from '../../src/db/capture/changes.js';

/** A change feed the test drives: always live, announcements sent by hand. */
export class ManualFeed implements ChangeFeed {
  readonly live = true;
  readonly source = 'triggers' as const;
  private readonly listeners = new Set<ChangeListener>();
  async started(): Promise<void> {}
  async caughtUp(): Promise<void> {}
  subscribe(listener: ChangeListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
  announce(change: Record<string, unknown>): void {
    for (const listener of this.listeners) listener.change(parseChange(JSON.stringify(change)));
  }
  async close(): Promise<void> {}
}
