import { describe, expect, it } from 'vitest';
import { retryDelay } from '../src/db/capture/feed.js';
import { TemporarySlotPlugin } from '../src/db/capture/logical.js';
import { PgoutputDecoder, type Malformed } from '../src/db/capture/pgoutput.js';
import type { Pgoutput } from 'pg-logical-replication';

/*
 * The stream's messages as the walsender writes them (pgoutput, protocol 1, binary values), read
 * by the library's parser through the feed's plugin, then classified. The PostgreSQL tests run the
 * same path against a server (`change-capture.test.ts`); these reach what a server does not send
 * on demand: a malformed message, a row of a relation never described.
 */

const int16 = (n: number) => Buffer.from([(n >> 8) & 0xff, n & 0xff]);
const int32 = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeInt32BE(n);
  return b;
};
const int64 = (n: bigint) => {
  const b = Buffer.alloc(8);
  b.writeBigInt64BE(n);
  return b;
};
const cstring = (s: string) => Buffer.concat([Buffer.from(s, 'utf8'), Buffer.from([0])]);
const tag = (c: string) => Buffer.from(c, 'latin1');

type Column = { name: string; type: number };
const TEXT = 25;
const INT4 = 23;
const TIMESTAMPTZ = 1184;

const begin = (xid: number) => Buffer.concat([tag('B'), int64(0x1000n), int64(0n), int32(xid)]);
const commit = (endLsn: bigint) =>
  Buffer.concat([tag('C'), Buffer.from([0]), int64(endLsn - 8n), int64(endLsn), int64(0n)]);
const relation = (oid: number, table: string, columns: Column[]) =>
  Buffer.concat([
    tag('R'),
    int32(oid),
    cstring('public'),
    cstring(table),
    tag('f'),
    int16(columns.length),
    ...columns.map((c) => Buffer.concat([Buffer.from([0]), cstring(c.name), int32(c.type), int32(-1)])),
  ]);
const value = (v: Buffer | null) => (v === null ? tag('n') : Buffer.concat([tag('b'), int32(v.length), v]));
const tuple = (values: (Buffer | null)[]) => Buffer.concat([int16(values.length), ...values.map(value)]);
const update = (oid: number, old: (Buffer | null)[], next: (Buffer | null)[]) =>
  Buffer.concat([tag('U'), int32(oid), tag('O'), tuple(old), tag('N'), tuple(next)]);
const text = (s: string) => Buffer.from(s, 'utf8');
const timestamp = (ms: number) => int64(BigInt(ms - 946_684_800_000) * 1000n);

const ORGANIZATION: Column[] = [
  { name: 'parentId', type: TEXT },
  { name: 'name', type: TEXT },
  { name: 'creditBalance', type: INT4 },
  { name: 'detailsRetrievalCount', type: INT4 },
];
const ACCOUNT: Column[] = [
  { name: 'id', type: TEXT },
  { name: 'parentId', type: TEXT },
  { name: 'publicKey', type: TEXT },
  { name: 'status', type: TEXT },
  { name: 'signInCount', type: INT4 },
  { name: 'lastLogin', type: TIMESTAMPTZ },
];

/** The plugin's parse, then the decoder: what the feed does with each message of the stream. */
function stream() {
  const plugin = new TemporarySlotPlugin(() => {}, 1000);
  const decoder = new PgoutputDecoder(() => 5000n);
  return {
    decoder,
    send: (message: Buffer) => decoder.decode(plugin.parse(message) as Pgoutput.Message | Malformed),
  };
}

describe('the replication stream, parsed by the library and classified', () => {
  it('a renamed organization is a stable change of that organization, with its transaction', () => {
    const { send } = stream();
    send(begin(4321));
    send(relation(1, 'Organization', ORGANIZATION));
    send(
      update(1, [text('USR_p1'), text('Old'), int32(10), int32(0)], [text('USR_p1'), text('New'), int32(10), int32(0)]),
    );
    expect(send(commit(0x2000n))).toEqual({
      kind: 'commit',
      endLsn: 0x2000n,
      changes: [
        expect.objectContaining({ kind: 'row', entity: 'organization', id: 'USR_p1', stable: true, version: 4321 }),
      ],
    });
  });

  it('a sign-in is activity (not stable), with the last login before and after; the retrieval counter is not announced', () => {
    const { send } = stream();
    send(begin(7));
    send(relation(2, 'Account', ACCOUNT));
    send(relation(1, 'Organization', ORGANIZATION));
    const before = Date.UTC(2026, 0, 1);
    const after = Date.UTC(2026, 0, 2);
    send(
      update(
        2,
        [text('USR_c1'), text('USR_p1'), null, text('active'), int32(1), timestamp(before)],
        [text('USR_c1'), text('USR_p1'), null, text('active'), int32(2), timestamp(after)],
      ),
    );
    send(
      update(1, [text('USR_p1'), text('Org'), int32(10), int32(0)], [text('USR_p1'), text('Org'), int32(10), int32(1)]),
    );
    const event = send(commit(0x3000n));
    expect(event).toEqual({
      kind: 'commit',
      endLsn: 0x3000n,
      changes: [
        expect.objectContaining({
          entity: 'account',
          id: 'USR_c1',
          parentId: 'USR_p1',
          stable: false,
          lastLogin: { before, after },
        }),
      ],
    });
  });

  it('a row of a relation the stream never described means that anything may have changed', () => {
    const { decoder, send } = stream();
    send(begin(8));
    send(
      update(
        99,
        [text('USR_p1'), text('Old'), int32(10), int32(0)],
        [text('USR_p1'), text('New'), int32(10), int32(0)],
      ),
    );
    expect(send(commit(0x4000n))).toEqual({ kind: 'commit', endLsn: 0x4000n, changes: [{ kind: 'all' }] });
    expect(decoder.malformed).toBe(1);
  });

  it('a message cut short, or of an unknown kind, means that anything may have changed; the next transaction is read as usual', () => {
    const { send } = stream();
    send(begin(9));
    send(relation(1, 'Organization', ORGANIZATION));
    const whole = update(
      1,
      [text('USR_p1'), text('Old'), int32(10), int32(0)],
      [text('USR_p1'), text('New'), int32(10), int32(0)],
    );
    send(whole.subarray(0, whole.length - 3));
    expect(send(commit(0x5000n))).toEqual({ kind: 'commit', endLsn: 0x5000n, changes: [{ kind: 'all' }] });
    send(begin(10));
    send(Buffer.concat([tag('Z'), int32(1)]));
    expect(send(commit(0x5100n))).toEqual({ kind: 'commit', endLsn: 0x5100n, changes: [{ kind: 'all' }] });
    send(begin(11));
    send(
      update(
        1,
        [text('USR_p1'), text('New'), int32(10), int32(0)],
        [text('USR_p1'), text('Newer'), int32(10), int32(0)],
      ),
    );
    expect(send(commit(0x5200n))).toEqual({
      kind: 'commit',
      endLsn: 0x5200n,
      changes: [expect.objectContaining({ entity: 'organization', id: 'USR_p1', stable: true })],
    });
  });

  it('a heartbeat message comes back with its text and position', () => {
    const { send } = stream();
    const content = text('abc:1');
    const message = Buffer.concat([
      tag('M'),
      Buffer.from([0]),
      int64(0x6000n),
      cstring('api_cache_heartbeat'),
      int32(content.length),
      content,
    ]);
    expect(send(message)).toEqual({ kind: 'message', prefix: 'api_cache_heartbeat', content: 'abc:1', lsn: 0x6000n });
  });
});

describe('reconnecting', () => {
  it('instances that lost the database together come back at different moments, each within its doubling bound', () => {
    for (const failures of [1, 2, 3, 6, 20]) {
      const ceiling = Math.min(100 * 2 ** Math.min(failures, 6), 5000);
      const delays = Array.from({ length: 200 }, () => retryDelay(failures));
      for (const delay of delays) {
        expect(delay).toBeGreaterThanOrEqual(ceiling / 2);
        expect(delay).toBeLessThanOrEqual(ceiling);
      }
      // Spread over the later half of the bound, not one instant.
      expect(new Set(delays.map((delay) => Math.round(delay))).size).toBeGreaterThan(50);
      expect(Math.max(...delays) - Math.min(...delays)).toBeGreaterThan(ceiling / 4);
    }
    expect(retryDelay(1, () => 0)).toBe(100);
    expect(retryDelay(1, () => 1)).toBe(200);
  });
});
