import { z } from 'zod';

/*
 * The triggers' change announcements, parsed once into a typed change: one-letter JSON keys (entity,
 * id, transaction, public key, parent, insert/delete, stable, last login before and after), or
 * `"all": true` for more rows than it lists.
 */

/** The tables the triggers announce, by the name they announce them under. */
export type ChangedEntity = 'account' | 'organization' | 'purchases' | 'usage';

export type RowChange = {
  kind: 'row';
  entity: ChangedEntity;
  /** The row's key: an account's id, an organization's parent id. */
  id: string;
  /** The transaction that made the change, when the announcement names it. */
  version: number | undefined;
  /** An account's public key (before or after the change). */
  publicKey: string | undefined;
  /** A child account's parent. */
  parentId: string | undefined;
  /** Added or removed under this key and parent (a move is both); undefined for other updates. */
  op: 'insert' | 'delete' | undefined;
  /** False when only activity changed (counters, last login, balances): what is built on the identity stays. */
  stable: boolean;
  /** A child's last login before and after, when the announcement names its transaction (null: never). */
  lastLogin: { before: number | null; after: number | null } | undefined;
};

/** Everything may have changed: whatever was derived from the database must be read again. */
export type Change = RowChange | { kind: 'all' };

const ANNOUNCEMENT = z.object({
  t: z.enum(['account', 'organization', 'purchases', 'usage']),
  id: z.string().optional(),
  x: z.number().int().nonnegative().optional(),
  k: z.string().optional(),
  p: z.string().optional(),
  o: z.enum(['i', 'd']).optional(),
  s: z.boolean().optional(),
  l: z.number().nullable().optional(),
  n: z.number().nullable().optional(),
  all: z.boolean().optional(),
});

const EVERYTHING: Change = { kind: 'all' };

/** One announcement as a change; anything not understood means everything may have changed. */
export function parseChange(payload: string): Change {
  let json: unknown;
  try {
    json = JSON.parse(payload);
  } catch {
    return EVERYTHING;
  }
  const parsed = ANNOUNCEMENT.safeParse(json);
  if (!parsed.success || parsed.data.all === true || parsed.data.id === undefined) return EVERYTHING;
  const { t, id, x, k, p, o, s, l, n } = parsed.data;
  const version = x !== undefined && Number.isSafeInteger(x) ? x : undefined;
  return {
    kind: 'row',
    entity: t,
    id,
    version,
    publicKey: k,
    parentId: p,
    op: o === 'i' ? 'insert' : o === 'd' ? 'delete' : undefined,
    stable: s !== false,
    // Only announcements that name their transaction carry the logins (absent: never logged in).
    lastLogin: version === undefined ? undefined : { before: l ?? null, after: n ?? null },
  };
}
