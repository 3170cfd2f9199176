import type { ChangeFeed } from '../db/capture/feed.js';
import type { Change, RowChange } from '../db/capture/changes.js';
import { Repeater } from '@repeaterjs/repeater';
import { ApiError } from '../errors.js';

/*
 * Live updates (GraphQL subscriptions over SSE): which subscription a database change concerns, and
 * when it may push. A subscription holds a flag, not a queue, so a slow client holds the same few
 * bytes; the next push reads the current answer. Bounded per credential, organization and instance.
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

/** Which of an organization's changes alter an answer: one function per kind, asked once per change. */
export type Concerns = (change: RowChange, organizationId: string) => boolean;

/** What one subscription follows: the organization, and which of its changes alter its answer. */
export type Topic = { organizationId: string; concerns: Concerns };

type Following = Map<Concerns, Set<Subscription<any>>>;

function followers(following: Following | undefined): number {
  let count = 0;
  for (const alike of following?.values() ?? []) count += alike.size;
  return count;
}

/** Where a subscription's answers go: its transport (an event stream, or an iterator for graphql-js). */
export type LiveSink<T> = {
  /** Sends an answer; the next is computed only once the returned promise settles (the client took it). */
  push(value: T): Promise<unknown> | void;
  /** The subscription ended by itself, or failed (`error`). */
  end(error?: unknown): void;
};

/** One open subscription: flags and at most one timer while it waits, a few hundred bytes. */
class Subscription<T = unknown> {
  dirty = false;
  ended = false;
  /** Computing or pushing an answer: a change only marks it dirty meanwhile. */
  busy = false;
  lastPush = Number.NEGATIVE_INFINITY;
  /** The wait for the interval after the last push, when a change came inside it. */
  timer: NodeJS.Timeout | undefined = undefined;
  sink: LiveSink<T> | undefined = undefined;

  constructor(
    readonly topic: Topic,
    readonly credential: string,
    /** When its token expires (epoch ms): the subscription ends then (see `LiveUpdates.sweep`). */
    readonly expiresAt: number,
    readonly compute: () => Promise<T | undefined>,
  ) {}
}

/**
 * A subscription made but not started: `start` gives it a sink and pushes its first answer, `cancel`
 * ends it silently. As an AsyncIterable it is what graphql-js subscribes with.
 */
export class LiveSubscription<T> implements AsyncIterable<T> {
  constructor(
    private readonly live: LiveUpdates,
    private readonly subscription: Subscription<T>,
  ) {}

  start(sink: LiveSink<T>): void {
    this.live.start(this.subscription, sink);
  }

  cancel(): void {
    this.live.release(this.subscription);
  }

  [Symbol.asyncIterator](): AsyncIterator<T> {
    return new Repeater<T>(async (push, stop) => {
      this.start({ push, end: (error) => stop(error) });
      await stop;
      this.cancel();
    })[Symbol.asyncIterator]();
  }
}

/** How often the expired subscriptions are ended: a stream outlives its token by at most this. */
const EXPIRY_SWEEP_MS = 500;
/** How long a shared answer is held for the subscriptions that want it, before it is held weakly. */
const SHARED_HOLD_MS = 5_000;

/** An answer read once for an organization's subscriptions at one version of its data. */
type SharedAnswer = {
  version: number;
  strong: Promise<unknown> | undefined;
  weak: WeakRef<Promise<unknown>>;
  at: number;
};

export class LiveUpdates {
  private readonly subscriptions = new Set<Subscription<any>>();
  private readonly byCredential = new Map<string, number>();
  private readonly byOrganization = new Map<string, Following>();
  private readonly unsubscribe: () => void;
  /** Per organization with open subscriptions: a number that moves with each change that concerns it. */
  private readonly versions = new Map<string, number>();
  /** Answers read at an organization's version, shared by the subscriptions that want the same one. */
  private readonly answers = new Map<string, SharedAnswer>();
  private epoch = 0;
  /** The sweep of expired subscriptions, while any is open. */
  private expiries: NodeJS.Timeout | undefined;
  private closed = false;
  pushes = 0;
  /** Answers computed for pushes (each one reads what it shows): a change that concerns nobody computes none. */
  computations = 0;
  /** Whether memory allows one more subscription (`ops/memory-pressure.ts`). */
  admits: () => boolean = () => true;

  constructor(
    feed: ChangeFeed,
    private readonly limits: LiveLimits,
    private readonly now: () => number = Date.now,
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
    const following = this.byOrganization.get(organizationId);
    if (!following) return;
    this.versions.set(organizationId, (this.versions.get(organizationId) ?? 0) + 1);
    for (const [concerns, subscriptions] of following) {
      if (concerns(change, organizationId)) for (const subscription of subscriptions) this.mark(subscription);
    }
  }

  /**
   * One read of an answer per organization and change, however many subscriptions push it; held for
   * SHARED_HOLD_MS, then weakly, since it holds its loaders.
   */
  shared<T>(organizationId: string, key: string, read: () => Promise<T>): Promise<T> {
    const version = (this.versions.get(organizationId) ?? 0) + this.epoch * 1e9;
    const slot = `${organizationId}|${key}`;
    const kept = this.answers.get(slot);
    const held = kept?.version === version ? (kept.strong ?? kept.weak.deref()) : undefined;
    if (held) return held as Promise<T>;
    const answer = read();
    const entry: SharedAnswer = { version, strong: answer, weak: new WeakRef(answer), at: this.now() };
    this.answers.set(slot, entry);
    // A failed read is not kept: the next push reads again.
    answer.catch(() => {
      if (this.answers.get(slot) === entry) this.answers.delete(slot);
    });
    return answer;
  }

  private mark(subscription: Subscription): void {
    subscription.dirty = true;
    this.schedule(subscription);
  }

  private schedule(subscription: Subscription): void {
    if (subscription.busy || subscription.ended || subscription.timer !== undefined || subscription.sink === undefined)
      return;
    const wait = subscription.lastPush + this.limits.minIntervalMs - this.now();
    if (wait <= 0) return void this.run(subscription);
    subscription.timer = setTimeout(() => {
      subscription.timer = undefined;
      void this.run(subscription);
    }, wait);
  }

  /** Computes the answer and pushes it, unless equal to the last; then follows the changes that came meanwhile. */
  private async run(subscription: Subscription): Promise<void> {
    subscription.busy = true;
    subscription.dirty = false;
    try {
      this.computations += 1;
      const value = await subscription.compute();
      if (value === undefined || subscription.ended) return;
      subscription.lastPush = this.now();
      this.pushes += 1;
      await subscription.sink!.push(value);
      // The caller may no longer read this (a locked account, a removed organization): said once, then the end.
      if (value instanceof Error) this.end(subscription);
    } catch (error) {
      this.end(subscription, error);
    } finally {
      subscription.busy = false;
      if (subscription.dirty) this.schedule(subscription);
    }
  }

  /**
   * Makes a subscription, counted against the bounds: it pushes `compute()`'s answer, then after each
   * change that concerns it at most once per `minIntervalMs`, until its token expires, the client
   * leaves or the instance stops. An unchanged answer is not pushed; a slow reader holds one at most.
   */
  subscribe<T>(
    credential: string,
    topic: Topic,
    expiresAtMs: number,
    compute: () => Promise<T | undefined>,
  ): LiveSubscription<T> {
    if (this.closed) throw new LiveUnavailableError();
    const { limits } = this;
    if (!this.admits())
      throw new TooManySubscriptionsError(
        'This server is low on memory; subscribe again later or on another instance.',
      );
    if (this.subscriptions.size >= limits.maxTotal)
      throw new TooManySubscriptionsError(
        'This server holds as many subscriptions as it allows; try again later or on another instance.',
      );
    if ((this.byCredential.get(credential) ?? 0) >= limits.maxPerCredential) {
      throw new TooManySubscriptionsError(
        `At most ${limits.maxPerCredential} subscriptions may be open with one credential.`,
      );
    }
    if (followers(this.byOrganization.get(topic.organizationId)) >= limits.maxPerOrganization) {
      throw new TooManySubscriptionsError(
        `At most ${limits.maxPerOrganization} subscriptions may be open for one organization.`,
      );
    }
    const subscription = new Subscription<T>(topic, credential, expiresAtMs, compute);
    this.subscriptions.add(subscription);
    this.byCredential.set(credential, (this.byCredential.get(credential) ?? 0) + 1);
    let following = this.byOrganization.get(topic.organizationId);
    if (!following) this.byOrganization.set(topic.organizationId, (following = new Map()));
    let alike = following.get(topic.concerns);
    if (!alike) following.set(topic.concerns, (alike = new Set()));
    alike.add(subscription);
    this.expiries ??= setInterval(() => this.sweep(), EXPIRY_SWEEP_MS).unref();
    return new LiveSubscription(this, subscription);
  }

  start<T>(subscription: Subscription<T>, sink: LiveSink<T>): void {
    if (subscription.sink !== undefined) return;
    subscription.sink = sink;
    if (subscription.ended) return sink.end();
    void this.run(subscription);
  }

  /** Forgets a subscription: its timers, its place in the counts. Once; later calls do nothing. */
  release(subscription: Subscription): void {
    subscription.ended = true;
    clearTimeout(subscription.timer);
    subscription.timer = undefined;
    if (!this.subscriptions.delete(subscription)) return;
    if (this.subscriptions.size === 0) {
      clearInterval(this.expiries);
      this.expiries = undefined;
    }
    const { credential, topic } = subscription;
    const count = (this.byCredential.get(credential) ?? 1) - 1;
    if (count === 0) this.byCredential.delete(credential);
    else this.byCredential.set(credential, count);
    const following = this.byOrganization.get(topic.organizationId);
    const alike = following?.get(topic.concerns);
    if (!following || !alike?.delete(subscription)) return;
    if (alike.size === 0) following.delete(topic.concerns);
    if (following.size === 0) {
      this.byOrganization.delete(topic.organizationId);
      this.versions.delete(topic.organizationId);
      for (const slot of this.answers.keys())
        if (slot.startsWith(`${topic.organizationId}|`)) this.answers.delete(slot);
    }
  }

  /** Ends a subscription from this side: released, and its stream told (it completes cleanly). */
  private end(subscription: Subscription, error?: unknown): void {
    if (!this.subscriptions.has(subscription)) return;
    this.release(subscription);
    subscription.sink?.end(error);
  }

  /** Ends the subscriptions whose token has expired: one timer for all of them, not one each. */
  private sweep(): void {
    const now = this.now();
    for (const subscription of this.subscriptions) if (subscription.expiresAt <= now) this.end(subscription);
    for (const entry of this.answers.values())
      if (entry.strong && now - entry.at > SHARED_HOLD_MS) entry.strong = undefined;
  }

  /** Ends every subscription (each stream completes cleanly) and refuses new ones: shutdown. */
  endAll(): void {
    this.closed = true;
    for (const subscription of [...this.subscriptions]) this.end(subscription);
  }

  close(): void {
    this.endAll();
    this.unsubscribe();
  }
}
