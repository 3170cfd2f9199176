import type { ChangedEntity, RowChange } from './capture/changes.js';
import { activityShift } from '../domain/activity.js';

/** The tags an entry carries: the rows whose change must drop it. */
export const cacheTags = {
  /** Any change to the account row. */
  account: (id: string) => `account:${id}`,
  /** A change to the account's identity (not its activity counters): type, status, keys, ... */
  identity: (id: string) => `identity:${id}`,
  /** The account holding this key, or its identity, changed (or one with this key appeared). */
  publicKey: (key: string) => `publicKey:${key}`,
  /** Any change to the organization row but the retrieval counter. */
  organization: (parentId: string) => `organization:${parentId}`,
  /** A change to the organization other than its balances, or a balance reaching or leaving zero. */
  organizationSettings: (parentId: string) => `organizationSettings:${parentId}`,
  purchases: (organizationId: string) => `purchases:${organizationId}`,
  usage: (organizationId: string) => `usage:${organizationId}`,
  /** A change to a child of this parent that may alter its counts: not a sign-in of a child as active as before. */
  children: (parentId: string) => `children:${parentId}`,
  /** A child of this parent added or removed (moves included): the number of its children. */
  childMembers: (parentId: string) => `childMembers:${parentId}`,
  /** Any change to any child of this parent, activity included: what a page of the list shows. */
  childRows: (parentId: string) => `childRows:${parentId}`,
};

/** The announced entities, each with the tag of its key. */
export const announcedTags: Record<ChangedEntity, (key: string) => string> = {
  account: cacheTags.account,
  organization: cacheTags.organization,
  purchases: cacheTags.purchases,
  usage: cacheTags.usage,
};

/**
 * The tags a row change drops: its own, whatever changed; for a stable change, what is built on the
 * row's identity; for a child, what it changes of its parent's list.
 */
export function droppedBy(change: RowChange, now: number): string[] {
  const { entity, id, stable, publicKey, parentId } = change;
  const tags = [announcedTags[entity](id)];
  if (stable) {
    if (entity === 'account') tags.push(cacheTags.identity(id));
    if (entity === 'organization') tags.push(cacheTags.organizationSettings(id));
    if (publicKey !== undefined) tags.push(cacheTags.publicKey(publicKey));
  }
  if (parentId !== undefined) {
    // Added or removed (moves included): the parent's number of children.
    if (change.op !== undefined) tags.push(cacheTags.childMembers(parentId));
    // Activity changes neither who is on a page nor its order: only the pages showing the child
    // go (they carry its account tag), and a stable change takes every page of the parent.
    if (stable) tags.push(cacheTags.childRows(parentId));
    // A sign-in of a child as active as before changes no count. Logins unknown (an announcement
    // without its transaction, from older triggers): counted again.
    const { lastLogin } = change;
    if (stable || lastLogin === undefined || activityShift(lastLogin.before, lastLogin.after, now) !== 'none')
      tags.push(cacheTags.children(parentId));
  }
  return tags;
}
