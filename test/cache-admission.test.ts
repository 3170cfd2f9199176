import { describe, expect, it } from 'vitest';
import { EntityCache } from '../src/db/entity-cache.js';
import { FrequencySketch } from '../src/db/frequency-sketch.js';
import { ManualFeed } from './helpers/manual-feed.js';

/*
 * The entity cache's admission (TinyLFU): while it has room it keeps every read; once full, a
 * new value takes the place of the least recently used only if its key was asked for more often
 * lately. No database: each read counts itself.
 */

describe('the frequency sketch', () => {
  it('counts asks per key, saturates at 15, and halves every counter after 10 × its width of asks', () => {
    const sketch = new FrequencySketch(1024);
    for (let i = 0; i < 3; i++) sketch.increment('account:USR_a');
    for (let i = 0; i < 40; i++) sketch.increment('account:USR_b');
    expect(sketch.frequency('account:USR_a')).toBe(3);
    expect(sketch.frequency('account:USR_b')).toBe(15);
    expect(sketch.frequency('account:USR_never')).toBe(0);
    expect(sketch.admits('account:USR_b', 'account:USR_a')).toBe(true);
    expect(sketch.admits('account:USR_a', 'account:USR_b')).toBe(false);
    // Other keys' asks age the counts: what was asked long ago fades.
    for (let i = 0; i < 10 * 1024; i++) sketch.increment(`account:USR_other${i}`);
    expect(sketch.frequency('account:USR_b')).toBeLessThanOrEqual(8);
    expect(sketch.bytes).toBe(4 * 1024);
  });
});

describe('admission to a full entity cache', () => {
  const setup = () => {
    const feed = new ManualFeed();
    const cache = new EntityCache(feed, { maxEntries: 3, maxBytes: 1 << 20, ttlMs: 60_000 });
    let reads = 0;
    const ask = (key: string) =>
      cache.through(key, {
        tags: [`tag:${key}`],
        read: async () => {
          reads += 1;
          return key.toUpperCase();
        },
      });
    return { cache, ask, reads: () => reads };
  };

  it('a key asked for once does not evict keys asked for often; asked for often enough, it takes the place of the least used', async () => {
    const { cache, ask, reads } = setup();
    for (const key of ['a', 'b', 'c']) await ask(key);
    expect(cache.size).toBe(3);
    // a, b and c are asked for again and again (hits): they are the ones callers come back for.
    for (let round = 0; round < 3; round++) for (const key of ['a', 'b', 'c']) await ask(key);
    expect(reads()).toBe(3);
    // A caller seen once: answered, not kept, nothing evicted.
    expect(await ask('d')).toBe('D');
    expect(reads()).toBe(4);
    expect(cache.size).toBe(3);
    for (const key of ['a', 'b', 'c']) expect(await ask(key)).toBe(key.toUpperCase());
    expect(reads()).toBe(4);
    // d comes back until it has been asked for more often than the least recently used (a): kept.
    // (a: read once and asked for four times since; d: read each time until it is kept.)
    for (let i = 0; i < 8; i++) await ask('d');
    const readsForD = reads() - 4;
    expect(readsForD).toBe(5);
    await ask('d');
    expect(reads()).toBe(4 + readsForD);
    expect(cache.size).toBe(3);
    // a was the least recently used: it went.
    await ask('a');
    expect(reads()).toBe(5 + readsForD);
  });

  it('a small byte bound still keeps entries: the sketch takes a share sized to it', async () => {
    const cache = new EntityCache(new ManualFeed(), { maxEntries: 150_000, maxBytes: 64 * 1024, ttlMs: 60_000 });
    let reads = 0;
    const ask = () => cache.through('k', { tags: ['tag:k'], read: async () => ++reads });
    await ask();
    await ask();
    expect(reads).toBe(1);
    expect(cache.size).toBe(1);
  });

  it('while the cache has room, every read is kept', async () => {
    const { cache, ask, reads } = setup();
    await ask('x');
    await ask('y');
    await ask('x');
    await ask('y');
    expect(reads()).toBe(2);
    expect(cache.size).toBe(2);
  });
});
