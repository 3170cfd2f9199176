import { createClient, type Client } from 'graphql-sse';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mintAccessToken } from '../src/auth/tokens.js';
import { operationId, STORED_OPERATIONS } from '../src/graphql/operations.js';
import { SIGN_IN_SQL, createChild, createOrganization, tokenFor, type BuiltOrganization } from './helpers/builders.js';
import { useServer } from './helpers/app.js';
import { testMode, useTestDatabase } from './helpers/database.js';

type Event = { data?: Record<string, any> | null; errors?: { message: string; extensions?: { code?: string } }[] };

/** A subscription as a client holds it: the events so far, whether it completed, and how to leave. */
function subscribeWith(client: Client, query: string) {
  const events: Event[] = [];
  let completed = false;
  let failed: unknown;
  const dispose = client.subscribe<Record<string, any>>(
    { query },
    {
      next: (event) => void events.push(event as Event),
      error: (error) => void (failed = error),
      complete: () => void (completed = true),
    },
  );
  return { events, dispose, completed: () => completed, failed: () => failed };
}

const CREDIT =
  'subscription { creditAnalysisChanged { creditBalance operationUsage { signIns } forecast { dailyBurn } } }';

describe(`live updates over Server-Sent Events (${testMode})`, () => {
  const database = useTestDatabase();
  const server = useServer(database, { env: { LIVE_MIN_INTERVAL_MS: '1000', LIVE_MAX_PER_CREDENTIAL: '2' } });
  let writer: pg.Client | undefined;
  const clients: Client[] = [];

  // The sign-in service: its own connection on PostgreSQL; on PGlite the one connection there is.
  beforeAll(async () => {
    if (testMode === 'postgres') {
      writer = new pg.Client({ connectionString: database().url! });
      await writer.connect();
    }
  });
  afterAll(async () => {
    for (const client of clients) client.dispose();
    await writer?.end();
  });

  const client = (token: string | undefined, headers: Record<string, string> = {}) => {
    const made = createClient({
      url: `${server().url}/graphql`,
      headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...headers },
      retryAttempts: 0,
    });
    clients.push(made);
    return made;
  };
  const signIn = (childId: string) =>
    writer ? writer.query(SIGN_IN_SQL, [childId]) : database().sql.query(SIGN_IN_SQL, [childId]);
  const live = () => server().app.deps.live!;

  async function organizationWithChild(): Promise<{ built: BuiltOrganization; childId: string; token: string }> {
    const built = await createOrganization(database());
    const child = await createChild(database(), built.parent);
    return { built, childId: child.id, token: await tokenFor(built.parent, built) };
  }

  it('pushes the analysis at once, then after a sign-in, with what changed', async () => {
    const { built, childId, token } = await organizationWithChild();
    const subscription = subscribeWith(client(token), CREDIT);
    await expect.poll(() => subscription.events.length, { timeout: 5_000 }).toBe(1);
    const first = subscription.events[0]!.data!.creditAnalysisChanged;
    expect(first.creditBalance).toBe(built.organization.creditBalance);
    await signIn(childId);
    await expect.poll(() => subscription.events.length, { timeout: 10_000 }).toBe(2);
    const second = subscription.events[1]!.data!.creditAnalysisChanged;
    expect(second.creditBalance).toBe(first.creditBalance - 1);
    expect(second.operationUsage.signIns).toBe(first.operationUsage.signIns + 1);
    subscription.dispose();
    await expect.poll(() => live().open, { timeout: 5_000 }).toBe(0);
  });

  it('coalesces: many sign-ins make at most one push a second, and the last shows them all', async () => {
    const { built, childId, token } = await organizationWithChild();
    const subscription = subscribeWith(client(token), CREDIT);
    await expect.poll(() => subscription.events.length, { timeout: 5_000 }).toBe(1);
    const started = Date.now();
    for (let i = 0; i < 30; i++) await signIn(childId);
    await expect
      .poll(() => subscription.events.at(-1)!.data!.creditAnalysisChanged.creditBalance, { timeout: 10_000 })
      .toBe(built.organization.creditBalance - 30);
    const seconds = (Date.now() - started) / 1000;
    // One at once after the first change, then at most one a second.
    expect(subscription.events.length - 1).toBeLessThanOrEqual(Math.ceil(seconds) + 1);
    // A change to another organization pushes nothing here.
    const other = await organizationWithChild();
    const before = subscription.events.length;
    await signIn(other.childId);
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    expect(subscription.events.length).toBe(before);
    subscription.dispose();
  });

  it("organization details follow the organization's settings: sign-ins (its balance) compute nothing, a rename is pushed", async () => {
    const { built, childId } = await organizationWithChild();
    const child = await createChild(database(), built.parent);
    const subscription = subscribeWith(
      client(await tokenFor(child, built)),
      'subscription { organizationChanged { organizationName } }',
    );
    await expect.poll(() => subscription.events.length, { timeout: 5_000 }).toBe(1);
    const computed = live().computations;
    for (let i = 0; i < 5; i++) await signIn(childId);
    // Long enough for the sign-ins to reach the cache and a push to have gone (at once: the interval has passed).
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    expect(live().computations).toBe(computed);
    expect(subscription.events).toHaveLength(1);
    const rename = `UPDATE "Organization" SET name = 'Renamed Ltd' WHERE "parentId" = $1`;
    await (writer ? writer.query(rename, [built.parent.id]) : database().sql.query(rename, [built.parent.id]));
    await expect.poll(() => subscription.events.length, { timeout: 10_000 }).toBe(2);
    expect(subscription.events[1]!.data!.organizationChanged.organizationName).toBe('Renamed Ltd');
    subscription.dispose();
  });

  it('parent-only, a token only, bounded per credential', async () => {
    const { built, token } = await organizationWithChild();
    const child = await createChild(database(), built.parent);
    const refusal = async (made: Client, query = CREDIT) => {
      const subscription = subscribeWith(made, query);
      await expect
        .poll(() => subscription.events.length + (subscription.completed() ? 1 : 0), { timeout: 5_000 })
        .toBeGreaterThan(0);
      return subscription.events[0]?.errors?.map((e) => e.extensions?.code);
    };
    expect(await refusal(client(await tokenFor(child, built)))).toEqual(['UNAUTHORIZED_ACCESS']);
    expect(await refusal(client(undefined, { 'x-public-key': built.parent.publicKey }))).toEqual(['UNAUTHORIZED']);
    // A child may follow its organization's details, with the secret masked.
    const details = subscribeWith(
      client(await tokenFor(child, built)),
      'subscription { organizationChanged { organizationName credentials { jwtSecret } } }',
    );
    await expect.poll(() => details.events.length, { timeout: 5_000 }).toBe(1);
    expect(details.events[0]!.data!.organizationChanged.credentials.jwtSecret).toBe('********');
    details.dispose();
    const held = [subscribeWith(client(token), CREDIT), subscribeWith(client(token), CREDIT)];
    await expect.poll(() => held.every((s) => s.events.length === 1), { timeout: 5_000 }).toBe(true);
    expect(await refusal(client(token))).toEqual(['TOO_MANY_SUBSCRIPTIONS']);
    for (const subscription of held) subscription.dispose();
    await expect.poll(() => live().open, { timeout: 5_000 }).toBe(0);
  });

  it('ends when the token expires', async () => {
    const { built } = await organizationWithChild();
    const token = await mintAccessToken({
      secret: built.organization.jwtSecret,
      kid: built.parent.publicKey,
      subject: built.parent.id,
      ttlSeconds: 2,
    });
    const subscription = subscribeWith(client(token), CREDIT);
    await expect.poll(() => subscription.events.length, { timeout: 5_000 }).toBe(1);
    await expect.poll(() => subscription.completed(), { timeout: 6_000 }).toBe(true);
    expect(live().open).toBe(0);
  });

  it('sends a heartbeat comment and the GraphQL over SSE events', async () => {
    const { token } = await organizationWithChild();
    const controller = new AbortController();
    const answer = await fetch(`${server().url}/graphql`, {
      method: 'POST',
      signal: controller.signal,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify({ query: CREDIT }),
    });
    expect(answer.status).toBe(200);
    expect(answer.headers.get('content-type')).toMatch(/^text\/event-stream/);
    expect(answer.headers.get('content-length')).toBeNull();
    const reader = answer.body!.getReader();
    let text = '';
    while (!text.includes('event: next')) text += new TextDecoder().decode((await reader.read()).value);
    expect(text.startsWith(':\n\n')).toBe(true);
    controller.abort();
    await expect.poll(() => live().open, { timeout: 5_000 }).toBe(0);
  });
});

describe(`live updates and shutdown (${testMode})`, () => {
  const database = useTestDatabase();
  const server = useServer(database);
  it('a draining instance completes every stream cleanly and takes no new one', async () => {
    const built = await createOrganization(database());
    const token = await tokenFor(built.parent, built);
    const made = createClient({
      url: `${server().url}/graphql`,
      headers: { authorization: `Bearer ${token}` },
      retryAttempts: 0,
    });
    const subscriptions = [subscribeWith(made, CREDIT), subscribeWith(made, CREDIT)];
    await expect.poll(() => subscriptions.every((s) => s.events.length === 1), { timeout: 5_000 }).toBe(true);
    server().app.drain();
    await expect.poll(() => subscriptions.every((s) => s.completed()), { timeout: 5_000 }).toBe(true);
    expect(subscriptions.every((s) => s.failed() === undefined)).toBe(true);
    const late = subscribeWith(made, CREDIT);
    await expect.poll(() => late.events.length + (late.completed() ? 1 : 0), { timeout: 5_000 }).toBeGreaterThan(0);
    expect(late.events[0]?.errors?.[0]?.extensions?.code).toBe('SERVICE_UNAVAILABLE');
    made.dispose();
  });
});

describe(`the stored live operation (${testMode})`, () => {
  const database = useTestDatabase();
  const server = useServer(database, { env: { GRAPHQL_PERSISTED_ONLY: 'true' } });
  it('runs by its id over Server-Sent Events, as GraphiQL and first-party clients send it', async () => {
    const built = await createOrganization(database());
    const stored = STORED_OPERATIONS.find((o) => o.name === 'CreditAnalysisLive')!;
    const made = createClient({
      url: `${server().url}/graphql`,
      headers: { authorization: `Bearer ${await tokenFor(built.parent, built)}` },
      retryAttempts: 0,
    });
    const events: Event[] = [];
    const dispose = made.subscribe(
      {
        query: '',
        operationName: 'CreditAnalysisLive',
        extensions: { persistedQuery: { version: 1, sha256Hash: operationId(stored.document) } },
      },
      { next: (event) => void events.push(event as Event), error: () => {}, complete: () => {} },
    );
    await expect.poll(() => events.length, { timeout: 5_000 }).toBe(1);
    expect(events[0]!.errors).toBeUndefined();
    expect(events[0]!.data!.creditAnalysisChanged.creditBalance).toBe(built.organization.creditBalance);
    dispose();
    made.dispose();
  });
});

describe(`live updates on several instances (${testMode})`, () => {
  const database = useTestDatabase();
  const first = useServer(database);
  const second = useServer(database);
  it('a sign-in written once is pushed to the subscriptions of every instance', async () => {
    const built = await createOrganization(database());
    const child = await createChild(database(), built.parent);
    const token = await tokenFor(built.parent, built);
    const clients = [first(), second()].map((target) =>
      createClient({ url: `${target.url}/graphql`, headers: { authorization: `Bearer ${token}` }, retryAttempts: 0 }),
    );
    const subscriptions = clients.map((made) => subscribeWith(made, CREDIT));
    await expect.poll(() => subscriptions.every((s) => s.events.length === 1), { timeout: 5_000 }).toBe(true);
    await database().sql.query(SIGN_IN_SQL, [child.id]);
    for (const subscription of subscriptions) {
      await expect
        .poll(() => subscription.events.at(-1)!.data!.creditAnalysisChanged.creditBalance, { timeout: 10_000 })
        .toBe(built.organization.creditBalance - 1);
    }
    for (const made of clients) made.dispose();
  });
});
