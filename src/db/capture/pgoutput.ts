import type { Pgoutput } from 'pg-logical-replication';
import type { Change, ChangedEntity, RowChange } from './changes.js';

/*
 * The `pgoutput` stream's rows as the caches' changes. Values come in binary, which spares the
 * walsender formatting timestamps as text (most of what decoding a sign-in cost); this file compares
 * old and new bytes and decodes the few columns it needs. A message the parser refuses means that
 * anything may have changed.
 */

/** A transaction changing more rows than this empties the caches instead of naming each row. */
export const BULK_ROWS = 500;

/** A column's value: its binary bytes, null, or undefined for an unchanged TOASTed value sent without the old row. */
type Value = Buffer | null | undefined;
type Tuple = Record<string, Value>;

/** A message the parser could not read. */
export type Malformed = { tag: 'malformed'; error: unknown };

/** Tables and the entity their changes are announced as (the publication's tables). */
const ENTITIES: Record<string, ChangedEntity> = {
  Account: 'account',
  Organization: 'organization',
  PackagePurchase: 'purchases',
  MonthlyUsage: 'usage',
};

/** An account's activity: what a sign-in changes, which leaves its identity (and its tokens) as they were. */
const ACCOUNT_ACTIVITY = new Set(
  (
    'childSignupCount signInCount emailConfirmationCount providerAAuthCount providerBAuthCount providerCAuthCount ' +
    'providerDAuthCount lastLogin lastLoginProvider lastLoginAttempt loginAttempts updatedAt'
  ).split(' '),
);
/** Written by the retrieval counter alone (decisions §3): changes nothing the API caches. */
const ORGANIZATION_UNANNOUNCED = new Set(['detailsRetrievalCount', 'lastDetailsRetrievalAt']);
/** What every sign-in changes in an organization; its settings (and its tokens' key) stay. */
const ORGANIZATION_BALANCES = ['creditBalance', 'accountBalance', 'availableBalance', 'updatedAt'];
/** An organization's settings: all but the unannounced columns and the balances. */
const ORGANIZATION_NOT_SETTINGS = new Set([...ORGANIZATION_UNANNOUNCED, ...ORGANIZATION_BALANCES]);

/** PostgreSQL's epoch (2000-01-01 UTC) in Unix milliseconds: binary timestamps count from it. */
const POSTGRES_EPOCH_MS = 946_684_800_000;

export type StreamEvent =
  | { kind: 'commit'; changes: Change[]; endLsn: bigint }
  | { kind: 'message'; prefix: string; content: string; lsn: bigint }
  | { kind: 'other' };

const OTHER: StreamEvent = { kind: 'other' };
const EVERYTHING: Change = { kind: 'all' };

/**
 * The stream's messages as the caches' changes, handed over at each commit with the 64-bit
 * transaction id, or as one "everything changed" past `BULK_ROWS` rows or on a TRUNCATE.
 */
export class PgoutputDecoder {
  private xid = 0;
  private changes: RowChange[] = [];
  private rows = 0;
  private everything = false;
  /** Rows that could not be told apart (a table without its old values): counted for the log. */
  unreadable = 0;
  /** Messages the parser refused: each one empties the caches. */
  malformed = 0;

  /** `nextXid`: a recent `pg_snapshot_xmax(pg_current_snapshot())`, for the transaction ids' epoch. */
  constructor(private readonly nextXid: () => bigint | undefined) {}

  decode(message: Pgoutput.Message | Malformed): StreamEvent {
    switch (message.tag) {
      case 'begin':
        // The parser reads the id as a signed 32-bit number.
        this.xid = message.xid >>> 0;
        this.changes = [];
        this.rows = 0;
        this.everything = false;
        return OTHER;
      case 'commit': {
        const version = this.version();
        const changes: Change[] = this.everything
          ? [EVERYTHING]
          : this.changes.map((change) => ({ ...change, version }));
        this.changes = [];
        return { kind: 'commit', changes, endLsn: parseLsn(message.commitEndLsn) };
      }
      case 'insert':
      case 'update':
      case 'delete': {
        this.rows += 1;
        if (this.everything || this.rows > BULK_ROWS) {
          this.everything = true;
          return OTHER;
        }
        const old = message.tag === 'insert' ? null : (message.old as Tuple | null);
        const next = message.tag === 'delete' ? null : (message.new as Tuple);
        this.row(message.relation, message.tag, old, next);
        return OTHER;
      }
      case 'truncate':
        this.everything = true;
        return OTHER;
      case 'malformed':
        // Which rows it named cannot be known: everything may have changed, and the commit says so.
        this.malformed += 1;
        this.everything = true;
        return OTHER;
      case 'message':
        return {
          kind: 'message',
          prefix: message.prefix,
          content: Buffer.from(message.content.buffer, message.content.byteOffset, message.content.byteLength).toString(
            'utf8',
          ),
          lsn: parseLsn(message.messageLsn),
        };
      default:
        return OTHER; // relation (the parser keeps it), type, origin
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

  /** `old`: the whole old row (replica identity FULL), or null when the stream did not send it. */
  private row(
    relation: Pgoutput.MessageRelation,
    op: 'insert' | 'update' | 'delete',
    old: Tuple | null,
    next: Tuple | null,
  ): void {
    const entity = ENTITIES[relation.name];
    if (entity === undefined) return;
    const text = (tuple: Tuple | null, column: string): string | undefined => {
      const value = tuple?.[column];
      return value ? value.toString('utf8') : undefined;
    };
    // An update or delete without the old row (its table's replica identity is not FULL): which
    // rows it affected cannot be told, so everything may have changed.
    if (op !== 'insert' && old === null && entity !== 'usage') {
      this.unreadable += 1;
      this.everything = true;
      return;
    }
    const change = (id: string | undefined, fields: Partial<RowChange> = {}): void => {
      if (id === undefined) return;
      this.changes.push({
        kind: 'row',
        entity,
        id,
        version: undefined,
        publicKey: undefined,
        parentId: undefined,
        op: undefined,
        stable: true,
        lastLogin: undefined,
        ...fields,
      });
    };
    if (entity === 'purchases' || entity === 'usage') {
      const before = text(old, 'organizationId');
      const after = text(next, 'organizationId');
      change(after ?? before);
      if (before !== undefined && after !== undefined && before !== after) change(before);
      return;
    }
    const keyColumn = entity === 'account' ? 'id' : 'parentId';
    if (op !== 'update') {
      const row = op === 'insert' ? next : old;
      change(
        text(row, keyColumn),
        entity === 'account' ? { publicKey: text(row, 'publicKey'), parentId: text(row, 'parentId'), op } : {},
      );
      return;
    }
    if (!next || !old) return;
    // An update: what changed decides what it is announced as.
    const differs = (skip: ReadonlySet<string>): boolean =>
      relation.columns.some(({ name }) => {
        if (skip.has(name)) return false;
        const after = next[name];
        // An unchanged TOASTed value is sent only with the old row (the parser gives the old one).
        return after !== undefined && !equalValues(old[name], after);
      });
    if (entity === 'organization') {
      if (!differs(ORGANIZATION_UNANNOUNCED)) return;
      const funded = (tuple: Tuple) => {
        const balance = tuple.creditBalance;
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
      lastLogin: { before: epochMs(old.lastLogin), after: epochMs(next.lastLogin) },
    });
    // Its old keys, as the row they no longer name.
    if (moved || publicKey.before !== publicKey.after) {
      change(id.before, {
        publicKey: publicKey.before,
        parentId: parentId.before,
        op: moved ? 'delete' : undefined,
        stable: true,
      });
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

/** A stream position (`X/Y`) as a number; 0 for none. */
export function parseLsn(text: string | null): bigint {
  if (!text) return 0n;
  const [high, low] = text.split('/');
  return (BigInt(`0x${high ?? '0'}`) << 32n) | BigInt(`0x${low ?? '0'}`);
}
