import type { ChangeFeed, ChangeListener } from '../../src/db/capture/feed.js';
import { parseChange } from '../../src/db/capture/changes.js';
import { MISS, type CachedLookup, type EntityCache } from '../../src/db/entity-cache.js';

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

/** The lookups of a whole key, as a ring record (its text) and as an entry. */
const WHOLE_KEY: CachedLookup<unknown>[] = [
  { namespace: '', tags: () => [], compact: { encode: String, decode: (text) => text } },
  { namespace: '', tags: () => [] },
];

/** What `cache` holds under the whole key (a ring record as its text), wrapped so that a held `null` differs from none. */
export function held(cache: EntityCache, key: string): { value: unknown } | undefined {
  for (const lookup of WHOLE_KEY) {
    const value = cache.hit(lookup, key);
    if (value !== MISS) return { value };
  }
  return undefined;
}
