import type { PrismaClient } from '../generated/prisma/client.js';

type Pending = { count: number; last: Date };

/**
 * The organization-details retrieval counter (decisions §3). Answers do not wait for the write:
 * increments are summed in memory and written in the background as one atomic
 * `count = count + n` per organization. A failed write keeps its increments for the next flush,
 * and `close()` flushes before the process exits, so none is lost.
 */
export class RetrievalCounter {
  private pending = new Map<string, Pending>();
  private timer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> = Promise.resolve();

  constructor(
    private readonly prisma: PrismaClient,
    private readonly onError: (error: unknown) => void = () => {},
    private readonly intervalMs = 250,
  ) {}

  record(organizationId: string, at: Date): void {
    const entry = this.pending.get(organizationId);
    if (entry) {
      entry.count += 1;
      if (at > entry.last) entry.last = at;
    } else {
      this.pending.set(organizationId, { count: 1, last: at });
    }
    this.timer ??= setTimeout(() => {
      this.timer = undefined;
      void this.flush();
    }, this.intervalMs);
  }

  /** Writes everything recorded so far; resolves when it is stored (or kept after a failure). */
  flush(): Promise<void> {
    this.flushing = this.flushing.then(() => this.write());
    return this.flushing;
  }

  async close(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    await this.flush();
  }

  get unsaved(): number {
    let sum = 0;
    for (const entry of this.pending.values()) sum += entry.count;
    return sum;
  }

  private async write(): Promise<void> {
    if (this.pending.size === 0) return;
    const batch = this.pending;
    this.pending = new Map();
    for (const [organizationId, entry] of batch) {
      try {
        await this.prisma.organization.updateMany({
          where: { parentId: organizationId },
          data: { detailsRetrievalCount: { increment: entry.count }, lastDetailsRetrievalAt: entry.last },
        });
      } catch (error) {
        this.onError(error);
        // Kept for the next flush, merged with whatever arrived meanwhile.
        const newer = this.pending.get(organizationId);
        this.pending.set(organizationId, {
          count: entry.count + (newer?.count ?? 0),
          last: newer && newer.last > entry.last ? newer.last : entry.last,
        });
        this.timer ??= setTimeout(() => {
          this.timer = undefined;
          void this.flush();
        }, this.intervalMs * 4);
      }
    }
  }
}
