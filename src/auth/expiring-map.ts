/**
 * A bounded map whose entries expire: the oldest entries go first when it is full. Serves the
 * signing-secret cache (found and not-found keys) and the memory of unknown public keys, so
 * that floods of random keys do not reach the database each time.
 */
export class ExpiringMap<V> {
  private readonly entries = new Map<string, { value: V; expires: number }>();

  constructor(private readonly maxEntries: number) {}

  /** The live entry for `key`, wrapped so that a stored `null` differs from no entry. */
  get(key: string, now = Date.now()): { value: V } | undefined {
    const entry = this.entries.get(key);
    if (!entry) return undefined;
    if (entry.expires > now) return entry;
    this.entries.delete(key);
    return undefined;
  }

  set(key: string, value: V, ttlMs: number, now = Date.now()): void {
    this.entries.delete(key);
    if (this.entries.size >= this.maxEntries) {
      const oldest = this.entries.keys().next();
      if (!oldest.done) this.entries.delete(oldest.value);
    }
    this.entries.set(key, { value, expires: now + ttlMs });
  }

  delete(key: string): void {
    this.entries.delete(key);
  }

  clear(): void {
    this.entries.clear();
  }
}

/** Keys recently looked up and not found. */
export class NegativeCache {
  private readonly map: ExpiringMap<true>;

  constructor(
    private readonly ttlMs: number,
    maxEntries: number,
  ) {
    this.map = new ExpiringMap(maxEntries);
  }

  has(key: string, now = Date.now()): boolean {
    return this.map.get(key, now) !== undefined;
  }

  add(key: string, now = Date.now()): void {
    this.map.set(key, true, this.ttlMs, now);
  }

  clear(): void {
    this.map.clear();
  }
}
