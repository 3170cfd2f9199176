import type { Change, ChangedEntity, RowChange } from './changes.js';

/*
 * The changes of PostgreSQL's logical replication stream (the `pgoutput` plugin, protocol version
 * 1, https://www.postgresql.org/docs/current/protocol-logicalrep-message-formats.html) as the
 * caches' changes. The stream is asked for values in binary (`binary 'true'`): the walsender
 * then writes each column with its type's send function, not its text output (formatting a
 * timestamp as text is most of what decoding a sign-in costs the server). pg-logical-replication's
 * own parser converts every column of every row with the driver's text parsers; the caches
 * compare a row's old and new values and read a few columns, so this one keeps values as the
 * bytes they came in, compares those, and decodes only the columns it needs (text keys, a
 * timestamp, an integer). Rows past a bulk transaction's bound are only counted, not decoded.
 */

/** A transaction changing more rows than this empties the caches instead of naming each row. */
export const BULK_ROWS = 500;

/** A column's value: its text bytes, null, or undefined for an unchanged TOASTed value. */
type Value = Buffer | null | undefined;
type Tuple = Value[];
type Relation = { entity: ChangedEntity | undefined; table: string; columns: Map<string, number>; names: string[] };

/** Tables and the entity their changes are announced as (the publication's tables). */
const ENTITIES: Record<string, ChangedEntity> = {
  Account: 'account',
  Organization: 'organization',
  PackagePurchase: 'purchases',
  MonthlyUsage: 'usage',
};

/** An account's activity: what a sign-in changes, which leaves its identity (and its tokens) as they were. */
const ACCOUNT_ACTIVITY = new Set([
  'childSignupCount', 'signInCount', 'emailConfirmationCount', 'providerAAuthCount', 'providerBAuthCount',
  'providerCAuthCount', 'providerDAuthCount', 'lastLogin', 'lastLoginProvider', 'lastLoginAttempt', 'loginAttempts', 'updatedAt',
]);
/** Written by the retrieval counter alone (decisions §3): changes nothing the API caches. */
const ORGANIZATION_UNANNOUNCED = new Set(['detailsRetrievalCount', 'lastDetailsRetrievalAt']);
/** What every sign-in changes in an organization; its settings (and its tokens' key) stay. */
const ORGANIZATION_BALANCES = ['creditBalance', 'accountBalance', 'availableBalance', 'updatedAt'];
/** An organization's settings: all but the unannounced columns and the balances. */
const ORGANIZATION_NOT_SETTINGS = new Set([...ORGANIZATION_UNANNOUNCED, ...ORGANIZATION_BALANCES]);

/** PostgreSQL's epoch (2000-01-01 UTC) in Unix milliseconds: binary timestamps count from it. */
const POSTGRES_EPOCH_MS = 946_684_800_000;

/** A message of the stream as the feed needs it. */
export type StreamEvent =
  | { kind: 'commit'; changes: Change[]; endLsn: bigint }
  | { kind: 'message'; prefix: string; content: string; lsn: bigint }
  | { kind: 'other' };

const OTHER: StreamEvent = { kind: 'other' };
const EVERYTHING: Change = { kind: 'all' };

class Reader {
  private at = 0;
  constructor(private readonly buffer: Buffer) {}
  byte(): number {
    return this.buffer.readUInt8(this.at++);
  }
  int16(): number {
    const value = this.buffer.readInt16BE(this.at);
    this.at += 2;
    return value;
  }
  uint32(): number {
    const value = this.buffer.readUInt32BE(this.at);
    this.at += 4;
    return value;
  }
  int32(): number {
    const value = this.buffer.readInt32BE(this.at);
    this.at += 4;
    return value;
  }
  lsn(): bigint {
    const value = this.buffer.readBigUInt64BE(this.at);
    this.at += 8;
    return value;
  }
  skip(bytes: number): void {
    this.at += bytes;
  }
  string(): string {
    const end = this.buffer.indexOf(0, this.at);
    const value = this.buffer.toString('utf8', this.at, end);
    this.at = end + 1;
    return value;
  }
  bytes(length: number): Buffer {
    const value = this.buffer.subarray(this.at, this.at + length);
    this.at += length;
    return value;
  }
  /** A tuple's values, or only its length walked past when `keep` is false. */
  tuple(keep: boolean): Tuple | undefined {
    const count = this.int16();
    const values: Tuple | undefined = keep ? new Array(count) : undefined;
    for (let i = 0; i < count; i++) {
      const kind = this.byte();
      let value: Value;
      if (kind === 0x6e /* n */) value = null;
      else if (kind === 0x75 /* u */) value = undefined;
      else value = this.bytes(this.int32()); // t (text) or b (binary)
      if (values) values[i] = value;
    }
    return values;
  }
}

/**
 * Turns the stream's messages into the caches' changes, a transaction at a time: its changes are
 * handed over at its commit, with its transaction id (widened to the 64-bit id read snapshots
 * carry, by `nextXid`), or as one "everything changed" past `BULK_ROWS` rows or on a TRUNCATE.
 */
export class PgoutputDecoder {
  private readonly relations = new Map<number, Relation>();
  private xid = 0;
  private changes: RowChange[] = [];
  private rows = 0;
  private everything = false;
  /** Rows that could not be told apart (a table without its old values): counted for the log. */
  unreadable = 0;

  /** `nextXid`: a recent `pg_snapshot_xmax(pg_current_snapshot())`, for the transaction ids' epoch. */
  constructor(private readonly nextXid: () => bigint | undefined) {}

  decode(message: Buffer): StreamEvent {
    const reader = new Reader(message);
    const tag = reader.byte();
    switch (tag) {
      case 0x42 /* B */: {
        reader.skip(16); // final LSN, commit time
        this.xid = reader.uint32();
        this.changes = [];
        this.rows = 0;
        this.everything = false;
        return OTHER;
      }
      case 0x43 /* C */: {
        reader.skip(1 + 8); // flags, commit LSN
        const endLsn = reader.lsn();
        const version = this.version();
        const changes: Change[] = this.everything ? [EVERYTHING] : this.changes.map((change) => ({ ...change, version }));
        this.changes = [];
        return { kind: 'commit', changes, endLsn };
      }
      case 0x52 /* R */: {
        const oid = reader.uint32();
        reader.string(); // namespace
        const table = reader.string();
        reader.byte(); // replica identity
        const count = reader.int16();
        const names: string[] = [];
        for (let i = 0; i < count; i++) {
          reader.byte(); // flags
          names.push(reader.string());
          reader.skip(8); // type oid, type modifier
        }
        this.relations.set(oid, { entity: ENTITIES[table], table, names, columns: new Map(names.map((name, i) => [name, i])) });
        return OTHER;
      }
      case 0x49 /* I */:
      case 0x55 /* U */:
      case 0x44 /* D */: {
        const relation = this.relations.get(reader.uint32());
        this.rows += 1;
        const keep = !this.everything && this.rows <= BULK_ROWS;
        if (!keep) this.everything = true;
        let old: Tuple | undefined;
        let fullOld = false;
        let next: Tuple | undefined;
        let part = reader.byte();
        if (part === 0x4b /* K */ || part === 0x4f /* O */) {
          fullOld = part === 0x4f;
          old = reader.tuple(keep);
          if (tag === 0x55) part = reader.byte();
        }
        if (part === 0x4e /* N */) next = reader.tuple(keep);
        if (keep && relation) this.row(relation, tag, old, fullOld, next);
        return OTHER;
      }
      case 0x54 /* T */:
        this.everything = true;
        return OTHER;
      case 0x4d /* M */: {
        reader.byte(); // flags
        const lsn = reader.lsn();
        const prefix = reader.string();
        const content = reader.bytes(reader.int32()).toString('utf8');
        return { kind: 'message', prefix, content, lsn };
      }
      default:
        return OTHER; // type, origin
    }
  }

  /** The transaction id as the 64-bit id of the read snapshots: the one within 2^31 of the next id. */
  private version(): number | undefined {
    const next = this.nextXid();
    if (next === undefined) return undefined;
    const epoch = next >> 32n;
    let full = (epoch << 32n) | BigInt(this.xid);
    if (full > next + 0x7fffffffn) full -= 0x100000000n;
    else if (full < next - 0x80000000n) full += 0x100000000n;
    return full >= 0n && full <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(full) : undefined;
  }

  private row(relation: Relation, tag: number, old: Tuple | undefined, fullOld: boolean, next: Tuple | undefined): void {
    const { entity } = relation;
    if (entity === undefined) return;
    const text = (tuple: Tuple | undefined, column: string): string | undefined => {
      const index = relation.columns.get(column);
      const value = index === undefined || !tuple ? undefined : tuple[index];
      return value ? value.toString('utf8') : undefined;
    };
    // An update or delete without the old row (its table's replica identity is not FULL): which
    // rows it affected cannot be told, so everything may have changed.
    if (tag !== 0x49 && !fullOld && entity !== 'usage') {
      this.unreadable += 1;
      this.everything = true;
      return;
    }
    const change = (id: string | undefined, fields: Partial<RowChange> = {}): void => {
      if (id === undefined) return;
      this.changes.push({ kind: 'row', entity, id, version: undefined, publicKey: undefined, parentId: undefined, op: undefined, stable: true, lastLogin: undefined, ...fields });
    };
    if (entity === 'purchases' || entity === 'usage') {
      const before = text(old, 'organizationId');
      const after = text(next, 'organizationId');
      change(after ?? before);
      if (before !== undefined && after !== undefined && before !== after) change(before);
      return;
    }
    const keyColumn = entity === 'account' ? 'id' : 'parentId';
    if (tag !== 0x55) {
      const row = tag === 0x49 ? next : old;
      change(text(row, keyColumn), entity === 'account' ? { publicKey: text(row, 'publicKey'), parentId: text(row, 'parentId'), op: tag === 0x49 ? 'insert' : 'delete' } : {});
      return;
    }
    // An update: what changed decides what it is announced as.
    const differs = (skip: ReadonlySet<string>): boolean =>
      relation.names.some((name, i) => {
        if (skip.has(name)) return false;
        const after = next![i];
        // An unchanged TOASTed value is sent only with the old row.
        return after !== undefined && !equalValues(old![i], after);
      });
    const value = (tuple: Tuple, name: string): Value => {
      const index = relation.columns.get(name);
      return index === undefined ? undefined : tuple[index];
    };
    if (!next || !old) return;
    if (entity === 'organization') {
      if (!differs(ORGANIZATION_UNANNOUNCED)) return;
      const funded = (tuple: Tuple) => {
        const balance = value(tuple, 'creditBalance');
        return balance?.length === 4 && balance.readInt32BE(0) > 0;
      };
      const stable = differs(ORGANIZATION_NOT_SETTINGS) || funded(old) !== funded(next);
      const before = text(old, 'parentId');
      const after = text(next, 'parentId');
      change(after, { stable });
      if (before !== after) change(before);
      return;
    }
    if (!differs(EMPTY)) return;
    const stable = differs(ACCOUNT_ACTIVITY);
    const id = { before: text(old, 'id'), after: text(next, 'id') };
    const publicKey = { before: text(old, 'publicKey'), after: text(next, 'publicKey') };
    const parentId = { before: text(old, 'parentId'), after: text(next, 'parentId') };
    const moved = id.before !== id.after || parentId.before !== parentId.after;
    change(id.after, {
      publicKey: publicKey.after,
      parentId: parentId.after,
      op: moved ? 'insert' : undefined,
      stable,
      lastLogin: { before: epochMs(value(old, 'lastLogin')), after: epochMs(value(next, 'lastLogin')) },
    });
    // Its old keys, as the row they no longer name.
    if (moved || publicKey.before !== publicKey.after) {
      change(id.before, { publicKey: publicKey.before, parentId: parentId.before, op: moved ? 'delete' : undefined, stable: true });
    }
  }
}

const EMPTY: ReadonlySet<string> = new Set();

function equalValues(a: Value, b: Value): boolean {
  if (a === b) return true;
  if (!a || !b) return false;
  return a.equals(b);
}

/** A binary timestamptz (microseconds since 2000-01-01 UTC) as Unix milliseconds; null for none or ±infinity. */
function epochMs(value: Value): number | null {
  if (!value || value.length !== 8) return null;
  const micros = value.readBigInt64BE(0);
  if (micros === 0x7fffffffffffffffn || micros === -0x8000000000000000n) return null;
  return Math.floor(Number(micros) / 1000) + POSTGRES_EPOCH_MS;
}
