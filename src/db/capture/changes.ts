import { z } from 'zod';

/*
 * The database's change announcements (migrations change_notifications and announced_versions),
 * parsed once, where they arrive, into a typed change. The triggers send one-letter JSON:
 * {"t": entity, "id": key, "x": transaction, "k"?: public key, "p"?: parent, "o"?: "i" or "d" for
 * a row added or removed under that parent, "s"?: whether what authentication relies on changed,
 * "l"/"n"?: last login before and after (epoch ms)} or
 * {"t": entity, "all": true} for a statement that changed more rows than it lists.
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
  /**
   * The row was added (`insert`) or removed (`delete`) under this key and parent; a row moved to
   * another parent is removed from the old and added to the new. Undefined for other updates.
   */
  op: 'insert' | 'delete' | undefined;
  /**
   * False when only activity changed (counters, last login, balances): identities, signing keys
   * and verified tokens built on the row stay valid.
   */
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

/**
 * One announcement as a change. Anything not understood (malformed JSON, an unknown entity, no
 * key) means everything may have changed: never a change silently missed.
 */
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
