/**
 * Which keys of a cache carry each tag, kept in step with the cache's entries by its owner: an
 * invalidated tag names the keys to drop. Most tags belong to one entry (an account's own): those
 * hold the key itself rather than a set of one.
 */
export class TagIndex {
  private readonly byTag = new Map<string, string | Set<string>>();

  add(key: string, tags: readonly string[]): void {
    for (const tag of tags) {
      const keys = this.byTag.get(tag);
      if (keys === undefined) this.byTag.set(tag, key);
      else if (typeof keys !== 'string') keys.add(key);
      else if (keys !== key) this.byTag.set(tag, new Set([keys, key]));
    }
  }

  remove(key: string, tags: readonly string[]): void {
    for (const tag of tags) {
      const keys = this.byTag.get(tag);
      if (keys === key) this.byTag.delete(tag);
      else if (typeof keys === 'object') {
        keys.delete(key);
        if (keys.size === 0) this.byTag.delete(tag);
      }
    }
  }

  /** The keys carrying `tag` now (a copy: the caller may drop them while it goes through them). */
  keys(tag: string): readonly string[] {
    const keys = this.byTag.get(tag);
    if (keys === undefined) return [];
    return typeof keys === 'string' ? [keys] : [...keys];
  }

  clear(): void {
    this.byTag.clear();
  }
}
