import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import type { ChangeFeed } from './db/change-feed.js';
import type { EntityCache } from './db/entity-cache.js';

/**
 * Prometheus metrics (`GET /metrics`): the process's own (CPU, memory, event loop, GC) and the
 * entity cache's. Values are read from their owners when scraped; no label takes a value from a
 * request, so the series are a fixed set.
 */
export function createMetrics(cache: EntityCache, feed: ChangeFeed): Registry {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  /** A counter mirroring a running total kept by its owner. */
  const mirrored = (name: string, help: string, read: () => number) =>
    new Counter({
      name,
      help,
      registers: [registry],
      collect() {
        this.reset();
        this.inc(read());
      },
    });
  const gauge = (name: string, help: string, read: () => number) =>
    new Gauge({
      name,
      help,
      registers: [registry],
      collect() {
        this.set(read());
      },
    });
  mirrored('api_cache_hits_total', 'Entity cache lookups answered from the cache.', () => cache.stats.hits);
  mirrored('api_cache_misses_total', 'Entity cache lookups that went to the database.', () => cache.stats.misses);
  mirrored('api_cache_evictions_total', 'Entries evicted to stay within the cache bounds.', () => cache.stats.evictions);
  mirrored('api_cache_invalidations_total', 'Tags invalidated by the database change announcements.', () => cache.stats.invalidations);
  gauge('api_cache_entries', 'Entries held by the entity cache.', () => cache.size);
  gauge('api_cache_bytes', 'Estimated bytes held by the entity cache.', () => cache.bytes);
  gauge('api_cache_live', '1 while the change feed is live and the cache in use, 0 while it is bypassed.', () => (feed.live ? 1 : 0));
  return registry;
}
