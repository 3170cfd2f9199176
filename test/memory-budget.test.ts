import v8 from 'node:v8';
import { describe, expect, it, onTestFinished } from 'vitest';
import { createChild, createOrganization, tokenFor } from './helpers/builders.js';
import { useServer } from './helpers/app.js';
import { testMode, useTestDatabase } from './helpers/database.js';
import type { IncomingMessage } from 'node:http';
import { loadConfig } from '../src/config.js';
import { RateLimiter } from '../src/http/rate-limit.js';
import { memoryBudget, TRACED_STREAM_BYTES, TRACING_HEAP_BYTES } from '../src/ops/memory-budget.js';
import { RING_MAX_BYTES } from '../src/db/record-ring.js';
import { MemoryPressure } from '../src/ops/memory-pressure.js';

const CREDIT = 'subscription { creditAnalysisChanged { creditBalance } }';

/** Opens a subscription as an event stream; resolves with the first event's text and a way to leave. */
async function subscribe(url: string, token: string): Promise<{ first: string; leave: () => void }> {
  const controller = new AbortController();
  const answer = await fetch(`${url}/graphql`, {
    method: 'POST',
    signal: controller.signal,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept: 'text/event-stream' },
    body: JSON.stringify({ query: CREDIT }),
  });
  const reader = answer.body!.getReader();
  let text = '';
  while (!text.includes('event: next')) text += new TextDecoder().decode((await reader.read()).value);
  while (!text.includes('\n\n', text.indexOf('event: next')))
    text += new TextDecoder().decode((await reader.read()).value);
  return { first: text, leave: () => controller.abort() };
}

describe(`the memory budget (${testMode})`, () => {
  const database = useTestDatabase();
  /** The heap's share of the budget as the pressure reads it; undefined: the real heap. */
  let ratio: number | undefined;
  const server = useServer(database, {
    memoryUsed: () =>
      ratio === undefined
        ? v8.getHeapStatistics().used_heap_size
        : ratio * server().app.deps.config.memory.oldGenerationBytes,
  });
  const at = (value: number | undefined) => {
    ratio = value;
    return server().app.pressure.sample();
  };

  it('sheds in order as the heap nears it (caches, then new streams, then requests), and recovers', async () => {
    const built = await createOrganization(database());
    await createChild(database(), built.parent);
    const token = await tokenFor(built.parent, built);
    const { url, app } = server();
    const profile = () => fetch(`${url}/auth/user-profile`, { headers: { authorization: `Bearer ${token}` } });
    const me = () => server().graphql<{ me: { id: string } }>('{ me { id } }', { token });
    expect((await profile()).status).toBe(200);
    expect((await me()).status).toBe(200);
    expect((await me()).status).toBe(200);
    const held = await subscribe(url, token);
    onTestFinished(() => {
      held.leave();
      at(undefined);
    });
    expect(held.first).toContain('creditBalance');
    const cached = app.deps.cache.bytes;
    expect(cached).toBeGreaterThan(0);

    // Level 1: the caches shrink; everything is still answered.
    expect(at(0.81)).toBe(1);
    expect(app.deps.cache.bytes).toBeLessThanOrEqual(cached / 2);
    expect((await profile()).status).toBe(200);

    // Level 2: a new stream is refused; the open one stays, requests are answered.
    expect(at(0.89)).toBe(2);
    const refused = await subscribe(url, token);
    expect(refused.first).toContain('TOO_MANY_SUBSCRIPTIONS');
    refused.leave();
    expect(app.deps.live!.open).toBe(1);
    expect((await profile()).status).toBe(200);

    // Level 3: requests are refused 503 with Retry-After, readiness says so; liveness and metrics answer.
    expect(at(0.96)).toBe(3);
    const shed = await profile();
    expect(shed.status).toBe(503);
    expect(shed.headers.get('retry-after')).toBe('5');
    expect(await shed.json()).toMatchObject({ success: false, error: { code: 'SERVICE_UNAVAILABLE' } });
    const graphql = await me();
    expect(graphql.status).toBe(503);
    expect(graphql.errors?.[0]?.extensions?.code).toBe('SERVICE_UNAVAILABLE');
    const ready = await fetch(`${url}/readyz`);
    expect(ready.status).toBe(503);
    expect(await ready.json()).toMatchObject({ reason: 'low on memory' });
    expect((await fetch(`${url}/healthz`)).status).toBe(200);
    const metrics = await (await fetch(`${url}/metrics`)).text();
    expect(metrics).toMatch(/api_memory_pressure_level 3/);
    expect(metrics).toMatch(/api_memory_refusals_total\{kind="streams"\} 1/);
    expect(metrics).toMatch(/api_memory_refusals_total\{kind="requests"\} 2/);
    expect(metrics).toMatch(/api_memory_refusals_total\{kind="busy"\} 0/);
    expect(metrics).toMatch(/api_memory_share_bytes\{share="entityCache"\} \d+/);

    // The heap falls back: everything is answered again, streams open again.
    expect(at(0.5)).toBe(0);
    expect((await profile()).status).toBe(200);
    expect((await fetch(`${url}/readyz`)).status).toBe(200);
    const again = await subscribe(url, token);
    expect(again.first).toContain('creditBalance');
    again.leave();
  });

  it("the rate limiter's memory store holds at most its share of keys, and still refuses a caller over its limit", async () => {
    const { rateLimit } = loadConfig({ RATE_LIMIT_PER_ADDRESS: '0', RATE_LIMIT_PER_CREDENTIAL: '3' });
    const limiter = new RateLimiter(rateLimit, undefined, undefined, 2_000);
    const request = (token: string) =>
      ({
        headers: { authorization: `Bearer ${token}` },
        socket: { remoteAddress: '10.0.0.1' },
      }) as unknown as IncomingMessage;
    // A flood of distinct credentials: the store keeps the most recent 1,000 (half the keys, per limit).
    for (let i = 0; i < 5_000; i++)
      expect((await limiter.check(limiter.clientOf(request(`flood-${i}`)))).allowed).toBe(true);
    expect(limiter.memoryKeys).toBe(1_000);
    const verdicts = [];
    for (let i = 0; i < 4; i++) verdicts.push((await limiter.check(limiter.clientOf(request('steady')))).allowed);
    expect(verdicts).toEqual([true, true, true, false]);
    limiter.close();
  });

  it('a budget smaller than what the process itself needs is refused, with the least that would do', () => {
    let least = 0;
    try {
      loadConfig({ MEMORY_BUDGET_MB: '64' });
    } catch (error) {
      expect((error as Error).message).toMatch(
        /MEMORY_BUDGET_MB: the memory budget \(MEMORY_BUDGET_MB, 64 MiB\) keeps 9\.0 MiB for the cache's records and gives the heap's old generation 16 MiB, too little for the process's own \d+ MiB below where shedding starts: raise MEMORY_BUDGET_MB to at least \d+/,
      );
      least = Number(/at least (\d+)/.exec((error as Error).message)![1]);
    }
    // The least it names is enough, and exactly: one less is refused.
    expect(() => loadConfig({ MEMORY_BUDGET_MB: String(least) })).not.toThrow();
    expect(() => loadConfig({ MEMORY_BUDGET_MB: String(least - 1) })).toThrow(/too little/);
  });

  it("traced, the SDK and its queue join the process's own objects, and a stream counts as its traced size", () => {
    const [plain, traced] = [
      loadConfig({ MEMORY_BUDGET_MB: '250' }).memory,
      loadConfig({ MEMORY_BUDGET_MB: '250', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }).memory,
    ];
    expect(traced.reserveBytes.base - plain.reserveBytes.base).toBe(TRACING_HEAP_BYTES);
    expect(traced.streamBytes).toBe(TRACED_STREAM_BYTES);
    expect(traced.maxStreams).toBeLessThan(plain.maxStreams);
    expect(traced.maxStreams * traced.streamBytes).toBeLessThanOrEqual(traced.shares.streams);
    // A budget that fits untraced may not fit traced: the refusal names the least that does.
    expect(() => loadConfig({ MEMORY_BUDGET_MB: '166' })).not.toThrow();
    expect(() => loadConfig({ MEMORY_BUDGET_MB: '166', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' })).toThrow(
      /raise MEMORY_BUDGET_MB to at least \d+/,
    );
  });

  it("gives the cache's records 14 % of a budget and 40 % of what it has above 190 MB, never more than one ring holds", () => {
    const records = (mebibytes: number) => loadConfig({ MEMORY_BUDGET_MB: String(mebibytes) }).memory.recordBytes;
    expect(records(170)).toBe(Math.floor(170 * 2 ** 20 * 0.14));
    expect(records(250)).toBe(Math.floor(250 * 2 ** 20 * 0.14 + (250 * 2 ** 20 - 190_000_000) * 0.4));
    // The default budget: about 139,000 users at 425 bytes.
    expect(memoryBudget(undefined, {}, { containerLimitBytes: undefined, heapLimitBytes: 2 ** 32 }).recordBytes).toBe(
      59_000_000,
    );
    // Past what one ring holds, the heap takes the rest.
    const large = loadConfig({ MEMORY_BUDGET_MB: '20000' }).memory;
    expect(large.recordBytes).toBe(RING_MAX_BYTES);
    expect(large.oldSpaceMiB).toBeGreaterThan(8000);
    expect(loadConfig({ MEMORY_BUDGET_MB: '20000', CACHE_MAX_BYTES: String(2 ** 32) }).memory.recordBytes).toBe(
      RING_MAX_BYTES,
    );
    // Explicit streams that do not fit beside the grown records keep them at 14 %: 10,000 streams need what
    // they needed.
    const streams = { LIVE_MAX_STREAMS: '10000' };
    expect(loadConfig({ MEMORY_BUDGET_MB: '426', ...streams }).memory.recordBytes).toBe(
      Math.floor(426 * 2 ** 20 * 0.14),
    );
    expect(() => loadConfig({ MEMORY_BUDGET_MB: '425', ...streams })).toThrow(
      /raise MEMORY_BUDGET_MB to at least 426$/,
    );
    expect(loadConfig({ MEMORY_BUDGET_MB: '1000', ...streams }).memory.recordBytes).toBe(
      Math.floor(1000 * 2 ** 20 * 0.14 + (1000 * 2 ** 20 - 190_000_000) * 0.4),
    );
  });
});

describe('the live heap before V8 has collected in full', () => {
  it('a heap in use near the budget shrinks the caches but refuses nothing until a full collection confirms it', () => {
    const MIB = 1024 * 1024;
    const heap = { bytes: 97 * MIB, collections: 0, read: () => heap.bytes };
    const shrunk: number[] = [];
    const pressure = new MemoryPressure({
      oldGenerationBytes: 100 * MIB,
      maxRequests: 10,
      heap,
      shrink: (fraction) => shrunk.push(fraction),
    });
    try {
      // Garbage and all (a process started without the heap flag): the caches shrink once.
      expect(pressure.sample()).toBe(1);
      expect(pressure.refusesRequest()).toBeUndefined();
      pressure.finished();
      expect(pressure.admitsStream()).toBe(true);
      expect(shrunk).toEqual([0.5]);
      // A full collection that kept as much: requests are refused.
      heap.collections = 1;
      expect(pressure.sample()).toBe(3);
      expect(pressure.refusesRequest()).toBe('memory');
      // One that kept less: served again.
      heap.bytes = 60 * MIB;
      heap.collections = 2;
      expect(pressure.sample()).toBe(0);
      expect(pressure.refusesRequest()).toBeUndefined();
    } finally {
      pressure.close();
    }
  });
});

describe("a client's part of the requests in progress", () => {
  it('an address or a credential holds a quarter of the bound at most; one more is refused, others are admitted, and a finished request gives its place back', () => {
    const pressure = new MemoryPressure({
      oldGenerationBytes: 1024 ** 3,
      maxRequests: 8,
      used: () => 0,
      shrink: () => {},
    });
    try {
      expect(pressure.clientPart).toBe(2);
      const mallory = ['address 203.0.113.7'];
      const token = (address: string) => [`address ${address}`, 'credential T'];
      expect(pressure.refusesRequest(mallory)).toBeUndefined();
      expect(pressure.refusesRequest(mallory)).toBeUndefined();
      expect(pressure.refusesRequest(mallory)).toBe('client');
      // The same credential from other addresses: its own part.
      expect(pressure.refusesRequest(token('10.0.0.1'))).toBeUndefined();
      expect(pressure.refusesRequest(token('10.0.0.2'))).toBeUndefined();
      expect(pressure.refusesRequest(token('10.0.0.3'))).toBe('client');
      // Others are admitted until the whole bound is taken.
      for (const address of ['a', 'b', 'c', 'd'])
        expect(pressure.refusesRequest([`address ${address}`])).toBeUndefined();
      expect(pressure.refusesRequest(['address e'])).toBe('busy');
      expect(pressure.refusals).toMatchObject({ client: 2, busy: 1 });
      pressure.finished(mallory);
      expect(pressure.inProgress).toBe(7);
      expect(pressure.refusesRequest(mallory)).toBeUndefined();
    } finally {
      pressure.close();
    }
  });
});
