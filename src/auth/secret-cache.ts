import type { PrismaClient } from '../generated/prisma/client.js';
import { ExpiringMap } from './expiring-map.js';

/** HS256 secrets must be at least 32 bytes (the seed refuses shorter ones; start-up reports them). */
export const MIN_SECRET_BYTES = 32;

export type SigningKey = { parentId: string; secret: Uint8Array };

/**
 * Organization signing secrets by public key (the token's `kid`), cached so that verifying a
 * token needs no database round trip (decisions §2). A changed secret takes effect within `ttlMs`.
 * Unknown keys are remembered too (for `negativeTtlMs`), so random `kid`s cost one query each
 * at most once in that window. Bounded: the oldest entries go first.
 */
export class SecretCache {
  private readonly entries: ExpiringMap<SigningKey | null>;
  private readonly pending = new Map<string, Promise<SigningKey | null>>();

  constructor(
    private readonly prisma: PrismaClient,
    private readonly options: { ttlMs: number; negativeTtlMs: number; maxEntries: number } = {
      ttlMs: 60_000,
      negativeTtlMs: 10_000,
      maxEntries: 50_000,
    },
  ) {
    this.entries = new ExpiringMap(options.maxEntries);
  }

  async get(publicKey: string, now = Date.now()): Promise<SigningKey | null> {
    const hit = this.entries.get(publicKey, now);
    if (hit) return hit.value;
    const inFlight = this.pending.get(publicKey);
    if (inFlight) return inFlight;
    const load = this.load(publicKey).finally(() => this.pending.delete(publicKey));
    this.pending.set(publicKey, load);
    const value = await load;
    this.entries.set(publicKey, value, value ? this.options.ttlMs : this.options.negativeTtlMs, now);
    return value;
  }

  /** Forgets one key, or everything. */
  invalidate(publicKey?: string): void {
    if (publicKey === undefined) this.entries.clear();
    else this.entries.delete(publicKey);
  }

  private async load(publicKey: string): Promise<SigningKey | null> {
    // One statement: the organization whose parent holds this key.
    const organization = await this.prisma.organization.findFirst({
      where: { parent: { publicKey, type: 'parent' } },
      select: { parentId: true, jwtSecret: true },
    });
    if (!organization) return null;
    const secret = new TextEncoder().encode(organization.jwtSecret);
    // An HS256 key shorter than the hash is guessable; such an organization gets no tokens through.
    if (secret.byteLength < MIN_SECRET_BYTES) return null;
    return { parentId: organization.parentId, secret };
  }
}
