import { connect, type Socket } from 'node:net';
import { beforeAll, describe, expect, it } from 'vitest';
import { EXPORT_BATCH_ROWS } from '../src/services/export-child-accounts.js';
import { csvField } from '../src/rest/export.js';
import { createChild, createOrganization, manyChildren, tokenFor, type BuiltOrganization } from './helpers/builders.js';
import { useCapturedLog, useServer } from './helpers/app.js';
import { testMode, useTestDatabase } from './helpers/database.js';

const PATH = '/auth/parent/child-accounts/export';

describe(`the child-list export (${testMode})`, () => {
  const database = useTestDatabase();
  const server = useServer(database, { env: { EXPORT_STALL_MS: '1000', EXPORT_RATE_COST: '1', LOG_LEVEL: 'warn' } });
  const costly = useServer(database, { env: { RATE_LIMIT_PER_CREDENTIAL: '100', EXPORT_RATE_COST: '40' } });
  const log = useCapturedLog();

  const get = (query: string, token?: string, headers: Record<string, string> = {}) =>
    fetch(`${server().url}${PATH}${query}`, {
      headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...headers },
    });

  it('CSV: every child newest first across batches, the same as the list pages, fields escaped', async () => {
    const built = await createOrganization(database());
    await manyChildren(database(), built, EXPORT_BATCH_ROWS * 2 + 17);
    const odd = await createChild(database(), built.parent, {
      username: '=HYPERLINK("x"),"a"',
      email: 'line\nbreak@example.com',
      createdAt: new Date('2026-01-01T00:00:00.000Z'),
      lastLogin: new Date('2026-02-01T00:00:00.000Z'),
    });
    const token = await tokenFor(built.parent, built);
    const answer = await get('?format=csv', token);
    expect(answer.status).toBe(200);
    expect(answer.headers.get('content-type')).toBe('text/csv; charset=utf-8; header=present');
    expect(answer.headers.get('content-disposition')).toMatch(
      /^attachment; filename="child-accounts-\d{4}-\d{2}-\d{2}\.csv"$/,
    );
    expect(answer.headers.get('cache-control')).toBe('no-store');
    const text = await answer.text();
    expect(text.startsWith('username,email,lastSeen,registered\r\n')).toBe(true);
    expect(text).toContain(`'=HYPERLINK(""x""),""a""`);
    expect(text.split('\r\n')[1]).toBe(
      `"'=HYPERLINK(""x""),""a""","line\nbreak@example.com",2026-02-01T00:00:00.000Z,2026-01-01T00:00:00.000Z`,
    );
    const lines = text.split('\r\n').slice(2, -1);
    expect(lines).toHaveLength(EXPORT_BATCH_ROWS * 2 + 17);
    expect(lines[0]).toBe(
      `bulk${EXPORT_BATCH_ROWS * 2 + 16},bulk${EXPORT_BATCH_ROWS * 2 + 16}@example.com,,${new Date(Date.UTC(2025, 0, 1) + (EXPORT_BATCH_ROWS * 2 + 16) * 1000).toISOString()}`,
    );
    expect(lines.at(-1)).toBe(`bulk0,bulk0@example.com,,2025-01-01T00:00:00.000Z`);
    expect(new Set(lines).size).toBe(lines.length);
    expect(odd.username).toBeDefined();
  });

  it('NDJSON with the list filters: one JSON object a line, exactly the matching children', async () => {
    const built = await createOrganization(database());
    await manyChildren(database(), built, 1_500);
    const token = await tokenFor(built.parent, built);
    const answer = await get(
      '?format=ndjson&search=BULK1&startDate=2025-01-01T00:00:10.000Z&endDate=2025-01-01T00:20:00.000Z',
      token,
    );
    expect(answer.headers.get('content-type')).toBe('application/x-ndjson; charset=utf-8');
    const rows = (await answer.text())
      .trimEnd()
      .split('\n')
      .map((line) => JSON.parse(line) as { username: string; lastSeen: null; registered: string });
    // bulk10..bulk19, bulk100..bulk199, bulk1000..bulk1199 registered within 10 s .. 20 min.
    const expected = Array.from({ length: 1_500 }, (_, i) => i)
      .filter((i) => String(i).startsWith('1') && i >= 10 && i <= 1_200)
      .reverse();
    expect(rows.map((r) => r.username)).toEqual(expected.map((i) => `bulk${i}`));
    expect(rows[0]).toEqual({
      username: `bulk${expected[0]}`,
      email: `bulk${expected[0]}@example.com`,
      lastSeen: null,
      registered: new Date(Date.UTC(2025, 0, 1) + expected[0]! * 1000).toISOString(),
    });
  });

  it('parent-only, filters checked before it starts, one export per organization at a time', async () => {
    const built = await createOrganization(database());
    const child = await createChild(database(), built.parent);
    const parentToken = await tokenFor(built.parent, built);
    const code = async (answer: Response) => [
      answer.status,
      ((await answer.json()) as { error: { code: string } }).error.code,
    ];
    expect(await code(await get('', await tokenFor(child, built)))).toEqual([401, 'UNAUTHORIZED_ACCESS']);
    expect(await code(await get('', undefined, { 'x-public-key': built.parent.publicKey }))).toEqual([
      401,
      'UNAUTHORIZED',
    ]);
    expect(await code(await get('?format=xml', parentToken))).toEqual([400, 'INVALID_FORMAT']);
    expect(await code(await get('?format=csv&format=csv', parentToken))).toEqual([400, 'INVALID_FORMAT']);
    expect(await code(await get(`?search=${'x'.repeat(201)}`, parentToken))).toEqual([400, 'INVALID_SEARCH']);
    expect(await code(await get('?startDate=2024-02-30', parentToken))).toEqual([400, 'INVALID_DATE_FORMAT']);
    const other = await createOrganization(database());
    await createChild(database(), other.parent, { username: 'someone-else' });
    expect(await (await get('', await tokenFor(other.parent, other))).text()).toContain('someone-else');
    expect(await (await get('', parentToken)).text()).not.toContain('someone-else');
    const post = await fetch(`${server().url}${PATH}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${parentToken}` },
    });
    expect(post.status).toBe(405);
  });

  it('counts as many requests as EXPORT_RATE_COST says', async () => {
    const built = await createOrganization(database());
    const token = await tokenFor(built.parent, built);
    // 100 a window, 40 an export: the third is refused.
    const costlyGet = () => fetch(`${costly().url}${PATH}`, { headers: { authorization: `Bearer ${token}` } });
    const first = await costlyGet();
    expect([first.status, await first.text()]).toEqual([200, 'username,email,lastSeen,registered\r\n']);
    expect((await costlyGet()).status).toBe(200);
    const refused = await costlyGet();
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).toMatch(/^\d+$/);
  });

  // A long stall bound: a slot freed in less than that was freed by the abort itself.
  const patient = useServer(database, { env: { EXPORT_STALL_MS: '60000', EXPORT_RATE_COST: '1' } });

  describe('an organization of 30,000 children, about 15 MB of CSV: more than the socket buffers on both sides hold', () => {
    let built: BuiltOrganization;
    let token: string;
    // Built once for the tests below: its long emails make it the suite's slowest seed.
    beforeAll(async () => {
      built = await createOrganization(database());
      for (let part = 0; part < 3; part++) await manyChildren(database(), built, 10_000, `slow${part}r`, 500);
      token = await tokenFor(built.parent, built);
    }, 300_000);

    it('a client that stops reading holds one batch or two, and is cut off after EXPORT_STALL_MS; the organization can export again', async () => {
      const url = new URL(server().url);
      const socket = connect(Number(url.port), url.hostname);
      socket.pause();
      let received = 0;
      const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
      socket.on('data', (chunk: Buffer) => (received += chunk.length));
      socket.on('error', () => {});
      socket.write(`GET ${PATH}?format=csv HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${token}\r\n\r\n`);
      await expect.poll(() => server().app.exports.running(), { timeout: 5_000 }).toBe(1);
      // Meanwhile the organization's second export is refused; another organization's is not.
      const busy = await get('', token);
      expect(busy.status).toBe(429);
      expect(((await busy.json()) as { error: { code: string } }).error.code).toBe('EXPORT_BUSY');
      const other = await createOrganization(database());
      expect((await get('', await tokenFor(other.parent, other))).status).toBe(200);
      await expect.poll(() => server().app.exports.running(), { timeout: 10_000 }).toBe(0);
      const ended = (await log.lines()).find((line) => line['message'] === 'an export ended before it was complete');
      expect(ended?.['reason']).toBe('client stalled');
      // What was read before the reader stalled: a few batches, not the 30,000 rows.
      expect(ended?.['rows']).toBeLessThan(15_000);
      // Reading now: what had been sent, then the end of the connection, never a complete answer.
      socket.resume();
      await closed;
      expect(received).toBeGreaterThan(0);
      expect(received).toBeLessThan(15_000 * 530);
      const again = await get('?format=ndjson&search=slow0r9999x', token);
      expect(again.status).toBe(200);
      expect(JSON.parse(await again.text()).username).toBe('slow0r9999');
    });

    it("an aborted download frees the organization's slot at once, not after the stall bound", async () => {
      const url = new URL(patient().url);
      for (const hangUp of [(socket: Socket) => socket.destroy(), (socket: Socket) => socket.resetAndDestroy()]) {
        const socket = connect(Number(url.port), url.hostname);
        socket.on('error', () => {});
        const started = new Promise<void>((resolve) => socket.once('data', () => resolve()));
        socket.write(`GET ${PATH}?format=csv HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${token}\r\n\r\n`);
        await started;
        socket.pause();
        await expect.poll(() => patient().app.exports.running(), { timeout: 5_000 }).toBe(1);
        const at = Date.now();
        hangUp(socket);
        await expect.poll(() => patient().app.exports.running(), { timeout: 10_000, interval: 20 }).toBe(0);
        // At once (milliseconds idle), not after the 60 s stall bound.
        expect(Date.now() - at).toBeLessThan(5_000);
        const again = await fetch(`${patient().url}${PATH}?format=ndjson&search=slow0r`, {
          headers: { authorization: `Bearer ${token}` },
          signal: AbortSignal.timeout(30_000),
        });
        expect(again.status).toBe(200);
        await again.body?.cancel();
        await expect.poll(() => patient().app.exports.running(), { timeout: 10_000 }).toBe(0);
      }
    });
  });

  it("filters never reach another organization's rows", async () => {
    const [mine, theirs] = [await createOrganization(database()), await createOrganization(database())];
    const at = new Date('2025-03-10T12:00:00.000Z');
    const own = await createChild(database(), mine.parent, {
      username: 'twin-mine',
      email: 'twin-mine@example.com',
      createdAt: at,
    });
    await createChild(database(), theirs.parent, {
      username: 'twin-theirs',
      email: 'twin-theirs@example.com',
      createdAt: at,
    });
    const token = await tokenFor(mine.parent, mine);
    for (const query of [
      'search=twin',
      'search=twin-theirs',
      'startDate=2025-03-10&endDate=2025-03-10',
      'search=%25',
      'search=_',
      `search=${theirs.parent.id}`,
    ]) {
      const answer = await fetch(`${patient().url}${PATH}?format=ndjson&${query}`, {
        headers: { authorization: `Bearer ${token}` },
      });
      expect(answer.status, query).toBe(200);
      const rows = (await answer.text())
        .split('\n')
        .filter(Boolean)
        .map((line) => JSON.parse(line) as { username: string });
      expect(
        rows.every((row) => row.username !== 'twin-theirs'),
        query,
      ).toBe(true);
      if (query === 'search=twin') expect(rows.map((row) => row.username)).toEqual([own.username]);
    }
  });

  it('CSV neutralises every value that starts with a formula character; NDJSON keeps the values as they are', async () => {
    const built = await createOrganization(database());
    const names = ['=1+1', '+1+1', '-1+1', '@SUM(A1)', '\tTAB', '\rCR'];
    for (const [i, username] of names.entries()) {
      await createChild(database(), built.parent, {
        username,
        email: `${['=', '+', '-', '@', '\t', '\r'][i]}mail${i}@example.com`,
        createdAt: new Date(Date.UTC(2025, 0, 1 + i)),
      });
    }
    const token = await tokenFor(built.parent, built);
    const csv = await (
      await fetch(`${patient().url}${PATH}?format=csv`, { headers: { authorization: `Bearer ${token}` } })
    ).text();
    const fields = parseCsv(csv).slice(1).flat();
    for (const value of [
      ...names,
      ...names.map((_, i) => `${['=', '+', '-', '@', '\t', '\r'][i]}mail${i}@example.com`),
    ]) {
      expect(fields, JSON.stringify(value)).toContain(`'${value}`);
      expect(fields, JSON.stringify(value)).not.toContain(value);
    }
    const ndjson = await (
      await fetch(`${patient().url}${PATH}?format=ndjson`, { headers: { authorization: `Bearer ${token}` } })
    ).text();
    const usernames = ndjson
      .split('\n')
      .filter(Boolean)
      .map((line) => (JSON.parse(line) as { username: string }).username);
    expect(usernames.sort()).toEqual([...names].sort());
  });
});

describe('CSV fields', () => {
  it('quote what needs quoting and keep formulas text', () => {
    expect(csvField('plain')).toBe('plain');
    expect(csvField('a,b')).toBe('"a,b"');
    expect(csvField('say "hi"')).toBe('"say ""hi"""');
    expect(csvField('=1+1')).toBe("'=1+1");
    expect(csvField('-2')).toBe("'-2");
    expect(csvField('@cmd')).toBe("'@cmd");
    expect(csvField('+x,y')).toBe(`"'+x,y"`);
  });
});

/** RFC 4180 records: quoted fields may hold commas, quotes (doubled) and line breaks. */
function parseCsv(text: string): string[][] {
  const records: string[][] = [];
  let record: string[] = [];
  let field = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') ((field += '"'), i++);
      else if (c === '"') quoted = false;
      else field += c;
    } else if (c === '"') quoted = true;
    else if (c === ',') (record.push(field), (field = ''));
    else if (c === '\r' && text[i + 1] === '\n')
      (record.push(field), records.push(record), (record = []), (field = ''), i++);
    else field += c;
  }
  return records;
}
