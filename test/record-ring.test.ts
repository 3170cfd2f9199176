import { describe, expect, it, vi } from 'vitest';
import { OffsetIndex, RecordRing, RING_INDEX_BYTES, RING_MAX_BYTES } from '../src/db/record-ring.js';
import { compactAccount, READ_ACCOUNT_COLUMNS, type AccountRow } from '../src/db/accounts.js';
import { compactToken } from '../src/db/verified-tokens.js';
import {
  enumOf,
  enumText,
  enumValues,
  FIELD,
  numberOf,
  numberText,
  optionalOf,
  optionalText,
} from '../src/db/compact-text.js';
import { EntityCache, type CompactForm } from '../src/db/entity-cache.js';
import { ManualFeed, held } from './helpers/manual-feed.js';

/*
 * The record ring (src/db/record-ring.ts): cached values as bytes in one buffer. Whatever it
 * forgets, it never answers a key with another key's value, with a value replaced or dropped
 * since, or with one whose tags were invalidated since; and it stays within its bytes.
 */

/** A deterministic generator, so that a failure is found again. */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
}

describe('the record ring', () => {
  it('answers what was stored, by its whole key, and drops it on request', () => {
    const ring = new RecordRing(64 * 1024, 60_000);
    expect(ring.set('account:USR_a', '["a"]', [])).toBe(true);
    expect(ring.set('account:USR_é', 'ünïcode ✓', [])).toBe(true);
    expect(ring.get('account:USR_a')).toBe('["a"]');
    expect(ring.get('account:USR_é')).toBe('ünïcode ✓');
    expect(ring.get('account:USR_b')).toBeUndefined();
    ring.set('account:USR_a', '["a2"]', []);
    expect(ring.get('account:USR_a')).toBe('["a2"]');
    expect(ring.size).toBe(2);
    ring.delete('account:USR_a');
    expect(ring.get('account:USR_a')).toBeUndefined();
    ring.clear();
    expect(ring.get('account:USR_é')).toBeUndefined();
    expect(ring.size).toBe(0);
  });

  it('never answers a key with the value of another key of the same hash', () => {
    const ring = new RecordRing(64 * 1024, 60_000);
    const hash = 12345;
    ring.set('token:first', 'one', [], hash);
    // Same hash, other key: the newer record replaces the older one in the index.
    ring.set('token:second', 'two', [], hash);
    expect(ring.get('token:first', hash)).toBeUndefined();
    expect(ring.get('token:second', hash)).toBe('two');
    // A key whose bytes are a prefix of the stored one's is not it.
    expect(ring.get('token:secon', hash)).toBeUndefined();
  });

  it('keeps a record that replaced another key of the same hash and the same tag set', () => {
    const ring = new RecordRing(64 * 1024, 60_000);
    const tags = ['identity:P1', 'organizationSettings:P1'];
    ring.set('token:first', 'one', tags, 7);
    ring.set('token:second', 'two', tags, 7);
    expect(ring.get('token:second', 7)).toBe('two');
    ring.invalidate('identity:P1');
    expect(ring.get('token:second', 7)).toBeUndefined();
  });

  it("makes a record stale when a tag of its set is invalidated, and only that set's records", () => {
    const ring = new RecordRing(64 * 1024, 60_000);
    ring.set('token:a', 'A', ['identity:P1', 'organizationSettings:P1']);
    ring.set('token:b', 'B', ['identity:P1', 'organizationSettings:P1']);
    ring.set('token:c', 'C', ['identity:P2', 'organizationSettings:P2']);
    ring.invalidate('organizationSettings:P1');
    expect(ring.get('token:a')).toBeUndefined();
    expect(ring.get('token:b')).toBeUndefined();
    expect(ring.get('token:c')).toBe('C');
    // Stored again after the invalidation: current.
    ring.set('token:a', 'A2', ['identity:P1', 'organizationSettings:P1']);
    expect(ring.get('token:a')).toBe('A2');
    ring.invalidate('unrelated:tag');
    expect(ring.get('token:a')).toBe('A2');
  });

  it('does not serve a record older than its time to live', () => {
    vi.useFakeTimers({ now: 1_000_000 });
    try {
      const ring = new RecordRing(64 * 1024, 10_000);
      ring.set('account:USR_a', 'A', []);
      vi.setSystemTime(1_000_000 + 9_000);
      expect(ring.get('account:USR_a')).toBe('A');
      vi.setSystemTime(1_000_000 + 12_000);
      expect(ring.get('account:USR_a')).toBeUndefined();
    } finally {
      vi.useRealTimers();
    }
  });

  it('refuses a record larger than its buffer, and keeps within its bytes and records', () => {
    const ring = new RecordRing(4096, 60_000);
    expect(ring.set('big', 'x'.repeat(4096), [])).toBe(false);
    for (let i = 0; i < 1000; i++) ring.set(`account:USR_${i}`, `value ${i}`, []);
    expect(ring.usedBytes).toBeLessThanOrEqual(ring.capacity);
    expect(ring.size).toBeLessThanOrEqual(ring.maxRecords);
    expect(ring.capacity + ring.maxRecords * RING_INDEX_BYTES).toBeLessThanOrEqual(4096);
    // First in, first out: the newest are held.
    expect(ring.get('account:USR_999')).toBe('value 999');
    expect(ring.get('account:USR_0')).toBeUndefined();
  });

  it('asked for more than 2 GiB, holds 2 GiB less one at most, and what it stores reads back', () => {
    // Node 20's Buffer#write wrote nothing into a longer buffer: every record read back as NULs.
    // The buffer and the index are mapped lazily: only the pages written are touched.
    const ring = new RecordRing(3 * 2 ** 30, 60_000);
    expect(ring.capacity).toBeGreaterThan(2 ** 30);
    expect(ring.capacity + ring.maxRecords * RING_INDEX_BYTES).toBeLessThanOrEqual(RING_MAX_BYTES);
    const token = compactToken.encode({
      subject: 'USR_1',
      parentId: 'USR_0',
      exp: 1_900_000_000,
      iat: 1_800_000_000,
      nbf: undefined,
    });
    expect(ring.set('token:abc', token, ['org:1'])).toBe(true);
    expect(ring.get('token:abc')).toBe(token);
  });

  it('names the oldest record held as the victim of a full ring, and none while it has room', () => {
    const ring = new RecordRing(8192, 60_000);
    const value = 'x'.repeat(200);
    expect(ring.victim(240)).toBeUndefined();
    let i = 0;
    while (ring.victim(240) === undefined) ring.set(`account:USR_${i++}`, value, []);
    expect(i).toBeGreaterThan(10);
    expect(ring.victim(240)).toBe(RecordRing.hash('account:USR_0'));
    // Dropped records are passed over: the oldest still held is the victim, or none once they make room.
    ring.delete('account:USR_0');
    expect(ring.victim(600)).toBe(RecordRing.hash('account:USR_1'));
    ring.delete('account:USR_1');
    ring.delete('account:USR_2');
    expect(ring.victim(240)).toBeUndefined();
    // Shrunk under memory pressure: the oldest go.
    ring.shrinkTo(ring.bytes / 2);
    expect(ring.get(`account:USR_3`)).toBeUndefined();
    expect(ring.get(`account:USR_${i - 1}`)).toBe(value);
  });

  it('drops the records it would no longer serve rather than naming them the victim of a full ring', () => {
    vi.useFakeTimers({ now: 1_000_000 });
    try {
      const ring = new RecordRing(8192, 10_000);
      const value = 'x'.repeat(200);
      // The oldest half carry a tag that is then invalidated; the next ones pass their time to live.
      let i = 0;
      for (; i < 8; i++) ring.set(`account:USR_${i}`, value, ['org:stale']);
      vi.setSystemTime(1_000_000 + 5_000);
      while (ring.victim(240) === undefined) ring.set(`account:USR_${i++}`, value, []);
      const full = i;
      ring.invalidate('org:stale');
      // The stale ones go, and their room is enough: no victim.
      expect(ring.victim(240)).toBeUndefined();
      expect(ring.size).toBe(full - 8);
      while (ring.victim(240) === undefined) ring.set(`account:USR_${i++}`, value, []);
      expect(ring.victim(240)).toBe(RecordRing.hash('account:USR_8'));
      // Once those written later are past their time to live too, none is left to defend its room.
      vi.setSystemTime(1_000_000 + 16_000);
      expect(ring.victim(240)).toBeUndefined();
      expect(ring.size).toBe(0);
      ring.set('account:USR_new', value, []);
      expect(ring.get('account:USR_new')).toBe(value);
    } finally {
      vi.useRealTimers();
    }
  });

  it('agrees with a map of what it was told, through random stores, drops and invalidations across many laps', () => {
    for (const seed of [1, 2, 3]) {
      const next = random(seed);
      const ring = new RecordRing(8 * 1024, 60_000);
      // What each key's value is now, and whether its tags were invalidated since it was stored.
      const model = new Map<string, { value: string; tags: string[]; stale: boolean }>();
      let found = 0;
      for (let step = 0; step < 40_000; step++) {
        const key = `k${Math.floor(next() * 300)}${next() < 0.05 ? 'é' : ''}`;
        const roll = next();
        if (roll < 0.5) {
          const value = `${key}=${step}:${'v'.repeat(Math.floor(next() * (next() < 0.02 ? 2000 : 120)))}`;
          const tags = next() < 0.3 ? [`org:${Math.floor(next() * 5)}`] : [];
          if (ring.set(key, value, tags)) model.set(key, { value, tags, stale: false });
          else model.delete(key);
        } else if (roll < 0.6) {
          ring.delete(key);
          model.delete(key);
        } else if (roll < 0.63) {
          const tag = `org:${Math.floor(next() * 5)}`;
          ring.invalidate(tag);
          for (const entry of model.values()) if (entry.tags.includes(tag)) entry.stale = true;
        } else {
          const held = ring.get(key);
          const expected = model.get(key);
          if (held !== undefined) {
            found += 1;
            expect(expected, `seed ${seed} step ${step}: ${key} answered after it was dropped`).toBeDefined();
            expect(held).toBe(expected!.value);
            expect(expected!.stale, `seed ${seed} step ${step}: ${key} answered after its tag was invalidated`).toBe(
              false,
            );
          }
        }
        expect(ring.usedBytes).toBeLessThanOrEqual(ring.capacity);
      }
      // It forgets, but it is a cache: most lookups of recent keys were answered.
      expect(found).toBeGreaterThan(1000);
    }
  });
});

describe("the ring's index", () => {
  it('finds every hash it holds and none it dropped, through runs of one home slot that wrap around the table', () => {
    for (const seed of [1, 2, 3]) {
      const next = random(seed);
      const index = new OffsetIndex(64);
      const model = new Map<number, number>();
      for (let step = 0; step < 50_000; step++) {
        // Few distinct homes (hash mod 64 in 0, 1, 62, 63): long probe runs across the table's end.
        const hash =
          [0, 1, 62, 63][Math.floor(next() * 4)]! + 64 * Math.floor(next() * 40) - (next() < 0.5 ? 2 ** 31 : 0);
        if (next() < 0.55 && (model.size < index.maxSize || model.has(hash))) {
          const at = Math.floor(next() * 2 ** 32 - 1);
          index.set(hash, at);
          model.set(hash, at);
        } else {
          index.delete(hash);
          model.delete(hash);
        }
        expect(index.size).toBe(model.size);
        if (step % 97 === 0) for (const [held, at] of model) expect(index.get(held)).toBe(at);
        expect(index.get(hash)).toBe(model.get(hash));
      }
      expect(index.maxSize).toBe(48);
    }
  });
});

describe('an account as a record', () => {
  it('comes back as it went in, every column in its place, timestamps as dates and nulls as nulls', () => {
    const full: AccountRow = {
      id: 'USR_child',
      type: 'child',
      parentId: 'USR_parent',
      username: 'ünïcode "quoted" \\ name',
      email: 'a@b.example',
      publicKey: 'APK_child_1',
      status: 'locked',
      emailVerified: true,
      createdAt: new Date(1),
      updatedAt: new Date(2),
      lastLogin: new Date(3),
      authProvider: 'providerA',
      lastLoginProvider: 'providerB',
      providerAId: 'pa-1',
      childSignupCount: 4,
      signInCount: 5,
      emailConfirmationCount: 6,
      providerAAuthCount: 7,
      providerBAuthCount: 8,
      providerCAuthCount: 9,
      providerDAuthCount: 10,
      lastPasswordChanged: new Date(11),
      loginAttempts: 12,
      lastLoginAttempt: new Date(13),
      lockedUntil: new Date(14),
      lastResetPasswordRequestAt: new Date(15),
    };
    expect(Object.keys(full).sort()).toEqual([...READ_ACCOUNT_COLUMNS].sort());
    expect(compactAccount.decode(compactAccount.encode(full), full.id)).toStrictEqual(full);
    const sparse: AccountRow = {
      ...full,
      parentId: null,
      lastLogin: null,
      lastLoginProvider: null,
      providerAId: null,
      lastPasswordChanged: null,
      lastLoginAttempt: null,
      lockedUntil: null,
      lastResetPasswordRequestAt: null,
    };
    expect(compactAccount.decode(compactAccount.encode(sparse), sparse.id)).toStrictEqual(sparse);
    // Texts that begin with the mark, empty ones, and times before 1970 or past the safe integers' milliseconds.
    const odd: AccountRow = {
      ...full,
      parentId: '',
      username: '~',
      email: '',
      providerAId: '~x',
      createdAt: new Date(-1),
      updatedAt: new Date(8.64e15),
    };
    expect(compactAccount.decode(compactAccount.encode(odd), odd.id)).toStrictEqual(odd);
  });
});

describe('a verified token as a record', () => {
  it('comes back as it went in: fractional and large times, no nbf, a subject that spells the separator or the mark', () => {
    for (const token of [
      { subject: 'USR_a', parentId: 'USR_p', exp: 1_800_000_000, iat: 1_700_000_000, nbf: undefined },
      {
        subject: `USR_a${FIELD}USR_b${FIELD}1${FIELD}2${FIELD}`,
        parentId: 'USR_p',
        exp: 1_800_000_000.5,
        iat: -1,
        nbf: 1_700_000_001,
      },
      { subject: '~', parentId: 'USR_p', exp: 1e300, iat: 0, nbf: 0 },
      { subject: '', parentId: 'USR_p', exp: Number.MAX_SAFE_INTEGER + 2, iat: 1, nbf: -0.25 },
    ]) {
      expect(compactToken.decode(compactToken.encode(token), 'key')).toStrictEqual(token);
    }
  });
});

describe('the compact texts', () => {
  it('numbers, enum values and nullable texts come back as they went in', () => {
    for (const value of [
      0,
      1,
      -1,
      35,
      36,
      1_789_973_851_392,
      -62_135_596_800_000,
      0.5,
      -1e-7,
      1e21,
      Number.MAX_SAFE_INTEGER,
      Number.MAX_SAFE_INTEGER + 2,
      null,
    ]) {
      expect(numberOf(numberText(value))).toBe(value);
    }
    expect(numberText(1_789_973_851_392)).toHaveLength(8);
    const values = enumValues<'a' | 'b'>({ a: 0, b: 1 });
    expect(values).toEqual(['a', 'b']);
    for (const value of ['a', 'b', 'c', '~a', ''] as ('a' | 'b')[])
      expect(enumOf(enumText(value, values), values)).toBe(value);
    for (const value of [null, '', '~', 'x', '~~x']) expect(optionalOf(optionalText(value))).toBe(value);
  });
});

describe('values the entity cache holds as records', () => {
  const asText: CompactForm<{ subject: string }> = {
    encode: (value) => JSON.stringify(value),
    decode: (text) => JSON.parse(text),
  };
  const setup = () => {
    const feed = new ManualFeed();
    const cache = new EntityCache(feed, { maxEntries: 1000, maxBytes: 1 << 20, ttlMs: 60_000 });
    let reads = 0;
    const token = (key: string, parentId: string) =>
      cache.through(key, {
        tags: [`identity:${parentId}`, `organizationSettings:${parentId}`],
        compact: asText,
        read: async () => {
          reads += 1;
          return { subject: key };
        },
      });
    return { feed, cache, token, reads: () => reads };
  };

  it('are read once, held as text, and dropped with the organization key they carry, not with another', async () => {
    const { feed, cache, token, reads } = setup();
    expect(await token('token:a', 'USR_p1')).toEqual({ subject: 'token:a' });
    expect(await token('token:b', 'USR_p2')).toEqual({ subject: 'token:b' });
    expect(await token('token:a', 'USR_p1')).toEqual({ subject: 'token:a' });
    expect(reads()).toBe(2);
    expect(held(cache, 'token:a')?.value).toBe('{"subject":"token:a"}');
    // The first organization's parent changes its identity (a stable change): its tokens go.
    feed.announce({ t: 'account', id: 'USR_p1', s: true });
    expect(held(cache, 'token:a')).toBeUndefined();
    await token('token:a', 'USR_p1');
    await token('token:b', 'USR_p2');
    expect(reads()).toBe(3);
    // A sign-in (activity) keeps them.
    feed.announce({ t: 'account', id: 'USR_p2', s: false });
    await token('token:b', 'USR_p2');
    expect(reads()).toBe(3);
    cache.close();
  });

  it('count in the byte bound, and go with everything else when the cache is cleared or shrunk', async () => {
    const { cache, token } = setup();
    for (let i = 0; i < 200; i++) await token(`token:${i}`, 'USR_p1');
    expect(cache.size).toBe(200);
    const bytes = cache.bytes;
    expect(bytes).toBeGreaterThan(200 * 60);
    cache.shrinkTo(bytes / 2);
    expect(cache.bytes).toBeLessThanOrEqual(bytes / 2);
    expect(held(cache, 'token:199')).toBeDefined();
    expect(held(cache, 'token:0')).toBeUndefined();
    cache.clear();
    expect(cache.size).toBe(0);
  });
});
