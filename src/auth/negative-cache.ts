/**
 * Remembers keys that were looked up and not found, for a short time, so that floods of random
 * keys do not reach the database each time. Bounded: the oldest entries go first.
 */
export class NegativeCache {
  private readonly entries = new Map<string, number>();

  constructor(
    private readonly ttlMs: number,
    private readonly maxEntries: number,
  ) {}

  has(key: string, now = Date.now()): boolean {
    const expires = this.entries.get(key);
    if (expires === undefined) return false;
    if (expires > now) return true;
    this.entries.delete(key);
    return false;
  }

  add(key: string, now = Date.now()): void {
    if (this.entries.size >= this.maxEntries) {
      const oldest = this.entries.keys().next();
      if (!oldest.done) this.entries.delete(oldest.value);
    }
    this.entries.delete(key);
    this.entries.set(key, now + this.ttlMs);
  }

  clear(): void {
    this.entries.clear();
  }
}
