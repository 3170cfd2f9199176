import type { ChangeFeed } from '../db/capture/feed.js';
import type { Change, RowChange } from '../db/capture/changes.js';
import { Repeater } from '@repeaterjs/repeater';
import { ApiError } from '../errors.js';

/*
 * Live updates (GraphQL subscriptions over Server-Sent Events): which open subscription a change
 * the database announces concerns, and when it may push. Each subscription holds one flag, not a
 * queue: however many changes arrive, and however slowly its client reads, it holds the same few
 * bytes, and the next push reads the current answer. Bounded per credential, per organization and
 * in total (per instance); every subscription ends when its token expires and when the instance
 * starts to shut down.
 */

export type LiveLimits = {
  /** At most one push per subscription in this time (the first change after a quiet spell goes at once). */
  minIntervalMs: number;
  maxPerCredential: number;
  maxPerOrganization: number;
  maxTotal: number;
};

export class TooManySubscriptionsError extends ApiError {
  constructor(message: string) {
    super('TOO_MANY_SUBSCRIPTIONS', 429, message);
  }
}

export class LiveUnavailableError extends ApiError {
  constructor() {
    super('SERVICE_UNAVAILABLE', 503, 'The server is shutting down; subscribe again on another instance.');
  }
}

/** What one subscription follows: the organization, and which of its changes alter its answer. */
export type Topic = { organizationId: string; concerns: (change: RowChange) => boolean };

type Subscription = {
  topic: Topic;
  credential: string;
  dirty: boolean;
  /** Set by the token's expiry, the instance's shutdown, or the client leaving. */
  ended: boolean;
  /** Waiting out the interval after a push: a change marks it dirty but does not wake it. */
  waitingInterval: boolean;
  wake: (() => void) | undefined;
};

const FOREVER_MS = 2_147_483_647;

/** Sleeps `ms`, or until the subscription is woken (a change, its end). */
const sleep = (ms: number, subscription: Subscription) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(() => {
      subscription.wake = undefined;
      resolve();
    }, ms);
    subscription.wake = () => {
      subscription.wake = undefined;
      clearTimeout(timer);
      resolve();
    };
  });

export class LiveUpdates {
  private readonly subscriptions = new Set<Subscription>();
  private readonly byCredential = new Map<string, number>();
  private readonly byOrganization = new Map<string, Set<Subscription>>();
  private readonly unsubscribe: () => void;
  /** Per organization with open subscriptions: a number that moves with each change that concerns it. */
  private readonly versions = new Map<string, number>();
  /** Answers read at an organization's version, shared by the subscriptions that want the same one. */
  private readonly answers = new Map<string, { version: number; answer: Promise<unknown> }>();
  private epoch = 0;
  private closed = false;
  /** Pushes made, for the metrics. */
  pushes = 0;

  constructor(
    feed: ChangeFeed,
    private readonly limits: LiveLimits,
  ) {
    this.unsubscribe = feed.subscribe({
      change: (change) => this.changed(change),
      // Announcements may have been missed: every answer may have changed.
      reset: () => this.changed({ kind: 'all' }),
    });
  }

  get open(): number {
    return this.subscriptions.size;
  }

  private changed(change: Change): void {
    if (change.kind === 'all') {
      this.epoch += 1;
      for (const subscription of this.subscriptions) this.mark(subscription);
      return;
    }
    const organizationId = change.entity === 'account' ? (change.parentId ?? change.id) : change.id;
    const interested = this.byOrganization.get(organizationId);
    if (!interested) return;
    this.versions.set(organizationId, (this.versions.get(organizationId) ?? 0) + 1);
    for (const subscription of interested) if (subscription.topic.concerns(change)) this.mark(subscription);
  }

  /**
   * One read of an answer per organization and change, however many subscriptions push it: the
   * subscriptions of one organization are woken by the same change and would otherwise each read
   * the same rows. `key` names what is read and for whom (the answer's kind and the caller).
   */
  shared<T>(organizationId: string, key: string, read: () => Promise<T>): Promise<T> {
    const version = (this.versions.get(organizationId) ?? 0) + this.epoch * 1e9;
    const slot = `${organizationId}|${key}`;
    const kept = this.answers.get(slot);
    if (kept && kept.version === version) return kept.answer as Promise<T>;
    const answer = read();
    this.answers.set(slot, { version, answer });
    // A failed read is not kept: the next push reads again.
    answer.catch(() => {
      if (this.answers.get(slot)?.answer === answer) this.answers.delete(slot);
    });
    return answer;
  }

  private mark(subscription: Subscription): void {
    subscription.dirty = true;
    if (!subscription.waitingInterval) subscription.wake?.();
  }

  /**
   * Opens a subscription: pushes `compute()`'s answer at once, then after each change that concerns
   * it, at most once per `minIntervalMs`, until the token expires (`expiresAtMs`), the client goes
   * away (the iterator's `return`, which ends it at once), or the instance shuts down. An answer
   * equal to the last one pushed is not pushed again (`compute` returns undefined for it). The next
   * answer is computed only once the client has taken the last: a slow reader holds one answer at
   * most. Refused beyond the bounds.
   */
  subscribe<T>(credential: string, topic: Topic, expiresAtMs: number, compute: () => Promise<T | undefined>, now: () => number = Date.now): Repeater<T> {
    if (this.closed) throw new LiveUnavailableError();
    const { limits } = this;
    if (this.subscriptions.size >= limits.maxTotal) throw new TooManySubscriptionsError('This server holds as many subscriptions as it allows; try again later or on another instance.');
    if ((this.byCredential.get(credential) ?? 0) >= limits.maxPerCredential) {
      throw new TooManySubscriptionsError(`At most ${limits.maxPerCredential} subscriptions may be open with one credential.`);
    }
    if ((this.byOrganization.get(topic.organizationId)?.size ?? 0) >= limits.maxPerOrganization) {
      throw new TooManySubscriptionsError(`At most ${limits.maxPerOrganization} subscriptions may be open for one organization.`);
    }
    const subscription: Subscription = { topic, credential, dirty: false, ended: false, waitingInterval: false, wake: undefined };
    this.subscriptions.add(subscription);
    this.byCredential.set(credential, (this.byCredential.get(credential) ?? 0) + 1);
    let organization = this.byOrganization.get(topic.organizationId);
    if (!organization) this.byOrganization.set(topic.organizationId, (organization = new Set()));
    organization.add(subscription);
    const expiry = setTimeout(() => this.end(subscription), Math.max(0, Math.min(expiresAtMs - now(), FOREVER_MS)));
    const release = () => {
      clearTimeout(expiry);
      subscription.ended = true;
      if (!this.subscriptions.delete(subscription)) return;
      const count = (this.byCredential.get(credential) ?? 1) - 1;
      if (count === 0) this.byCredential.delete(credential);
      else this.byCredential.set(credential, count);
      organization!.delete(subscription);
      if (organization!.size === 0) {
        this.byOrganization.delete(topic.organizationId);
        this.versions.delete(topic.organizationId);
        for (const slot of this.answers.keys()) if (slot.startsWith(`${topic.organizationId}|`)) this.answers.delete(slot);
      }
    };
    return new Repeater<T>(async (push, stop) => {
      void stop.then(() => this.end(subscription));
      try {
        let lastPush = Number.NEGATIVE_INFINITY;
        for (let first = true; !subscription.ended; first = false) {
          if (!first) {
            while (!subscription.dirty && !subscription.ended) await sleep(FOREVER_MS, subscription);
            const wait = lastPush + limits.minIntervalMs - now();
            if (wait > 0 && !subscription.ended) {
              subscription.waitingInterval = true;
              await sleep(wait, subscription);
              subscription.waitingInterval = false;
            }
            if (subscription.ended) break;
          }
          subscription.dirty = false;
          const value = await compute();
          if (value === undefined || subscription.ended) continue;
          lastPush = now();
          this.pushes += 1;
          await push(value);
          // The caller may no longer read this (a locked account, a removed organization): said once, then the end.
          if (value instanceof Error) break;
        }
        stop();
      } catch (error) {
        stop(error);
      } finally {
        release();
      }
    });
  }

  private end(subscription: Subscription): void {
    subscription.ended = true;
    subscription.wake?.();
  }

  /** Ends every subscription (each stream completes cleanly) and refuses new ones: shutdown. */
  endAll(): void {
    this.closed = true;
    for (const subscription of this.subscriptions) this.end(subscription);
  }

  close(): void {
    this.endAll();
    this.unsubscribe();
  }
}
