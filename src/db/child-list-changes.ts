import type { ChangeFeed } from './capture/feed.js';
import type { RowChange } from './capture/changes.js';
import { cacheTags } from './cache-tags.js';
import type { EntityCache } from './entity-cache.js';
import { activeAt } from '../domain/activity.js';
import { CHILD_COUNT_NAMESPACE } from './loaders.js';

/**
 * A parent's child counts as cached (see `child-list.ts`): `total` null when taken from
 * the organization's child count; valid from `computedAt` until `validUntil`, when the oldest login
 * it counted as active leaves the window.
 */
export type ChildCounts = { total: number | null; active: number; computedAt: number; validUntil: number };

/** The key of a parent's unfiltered child counts (no search, no dates). */
export const childCountsKey = (parentId: string) => `stats:${parentId}|||`;

/**
 * Keeps the child list's cached first pages and counts current as children change: a stable change
 * drops the parent's pages, a sign-in only the pages showing the child. A parent's counts change only if a
 * child was added, removed, renamed or moved (a stable change), or became active or inactive. A
 * child logging in for the first time in the window (what most sign-ins are) adds one to the
 * parent's unfiltered active count, which is amended in place rather than counted again; the
 * filtered counts are dropped. A child added or removed amends the parent's number of children.
 * Returns the unsubscribe function.
 */
export function keepChildListCurrent(feed: ChangeFeed, cache: EntityCache, now: () => number): () => void {
  const childChanged = ({ parentId, stable, lastLogin, version, op }: RowChange & { parentId: string }) => {
    // A child added or removed: the parent's cached number of children is brought up to date in
    // place (unless the count already saw the change), not counted again.
    if (op !== undefined) {
      const step = op === 'insert' ? 1 : -1;
      cache.invalidate(cacheTags.childMembers(parentId), version, {
        key: `${CHILD_COUNT_NAMESPACE}:${parentId}`,
        amend: (children: number | null) => Math.max(0, (children ?? 0) + step),
      });
    }
    // A stable change (a child added, removed, renamed, moved) may change which children a cached
    // first page holds: every page of the parent goes. Activity (a sign-in's counters and last
    // login) changes neither membership nor order: it drops only the pages showing that child,
    // which carry its `account:` tag (see `child-list.ts`).
    if (stable) cache.invalidate(cacheTags.childRows(parentId), version);
    const at = now();
    const wasActive = lastLogin !== undefined && activeAt(lastLogin.before, at);
    const isActive = lastLogin !== undefined && activeAt(lastLogin.after, at);
    // Activity only, and the child is as active as it was: nothing counted changes.
    if (!stable && lastLogin !== undefined && wasActive === isActive) return;
    const becameActive = !stable && !wasActive && isActive;
    cache.invalidate(cacheTags.children(parentId), version, {
      key: childCountsKey(parentId),
      // Only while fresh: every child it counted logged in after `validUntil` minus the window,
      // so this one, inactive until now, was not among them.
      amend: becameActive
        ? (counts: ChildCounts) => (at < counts.computedAt || at >= counts.validUntil ? undefined : { ...counts, active: counts.active + 1 })
        : undefined,
    });
  };
  return feed.subscribe({
    change: (change) => {
      if (change.kind === 'row' && change.parentId !== undefined) childChanged({ ...change, parentId: change.parentId });
    },
    reset: () => {},
  });
}
