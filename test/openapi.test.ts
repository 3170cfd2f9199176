import { get, type IncomingHttpHeaders } from 'node:http';
import { gunzipSync } from 'node:zlib';
import { validate } from '@readme/openapi-parser';
import { describe, expect, it } from 'vitest';
import { openApiDocument } from '../src/rest/openapi.js';
import { rest, useServer } from './helpers/app.js';
import { testMode, useTestDatabase } from './helpers/database.js';
import { contractViolations } from './helpers/openapi.js';

/** A GET with exactly these headers (fetch adds its own Accept-Encoding). */
function raw(
  url: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; headers: IncomingHttpHeaders; body: Buffer }> {
  return new Promise((resolve, reject) => {
    get(url, { headers }, (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () =>
        resolve({ status: response.statusCode!, headers: response.headers, body: Buffer.concat(chunks) }),
      );
      response.on('error', reject);
    }).on('error', reject);
  });
}

describe('the OpenAPI description', () => {
  it('is a valid OpenAPI 3.1 document describing the four paths, both credentials and every error code', async () => {
    const document = structuredClone(openApiDocument()) as any;
    const result = await validate(document);
    expect(result.valid, JSON.stringify(result)).toBe(true);
    expect(document.openapi).toBe('3.1.0');
    expect(Object.keys(document.paths).sort()).toEqual([
      '/auth/child-accounts',
      '/auth/organization-details',
      '/auth/parent/child-accounts/export',
      '/auth/user-profile',
      '/parent/credit-analysis',
    ]);
    expect(Object.keys(document.components.securitySchemes).sort()).toEqual(['bearerAuth', 'publicKey']);
    const params = document.paths['/auth/child-accounts'].get.parameters.map((p: { name: string }) => p.name).sort();
    expect(params).toEqual(['If-None-Match', 'endDate', 'lastKey', 'limit', 'search', 'startDate']);
    for (const [path, item] of Object.entries<any>(document.paths)) {
      if (path === '/auth/parent/child-accounts/export') {
        expect(Object.keys(item.get.responses['200'].content).sort()).toEqual(['application/x-ndjson', 'text/csv']);
        expect(item.get.responses['304']).toBeUndefined();
        continue;
      }
      expect(item.get.parameters.find((p: { name: string; in: string }) => p.name === 'If-None-Match')?.in).toBe(
        'header',
      );
      expect(item.get.responses['304'].headers.ETag).toBeDefined();
      expect(item.get.responses['200'].headers.ETag).toBeDefined();
    }
    const text = JSON.stringify(document);
    for (const code of [
      'UNAUTHORIZED',
      'UNAUTHORIZED_ACCESS',
      'ACCOUNT_INACTIVE',
      'CREDITS_DEPLETED',
      'USER_NOT_FOUND',
      'MISSING_PARENT_PUBLIC_KEY',
      'INVALID_PARENT_ACCOUNT',
      'INVALID_DATE_FORMAT',
      'INVALID_LIMIT',
      'INVALID_PAGINATION_TOKEN',
      'INVALID_SEARCH',
      'METHOD_NOT_ALLOWED',
      'SERVICE_UNAVAILABLE',
      'INTERNAL_ERROR',
    ]) {
      expect(text).toContain(`"${code}"`);
    }
  });

  it('gives an example for every answer, each valid against its own schema', () => {
    const document = openApiDocument() as any;
    for (const [path, item] of Object.entries<any>(document.paths)) {
      for (const [status, response] of Object.entries<any>(item.get.responses)) {
        if (status === '304') {
          expect(response.content, `${path} 304 has no body`).toBeUndefined();
          continue;
        }
        if (!response.content['application/json']) {
          // The export's file: an example of each format.
          for (const media of Object.values<any>(response.content))
            expect(Object.keys(media.examples ?? {}).length, `${path} ${status}`).toBeGreaterThan(0);
          continue;
        }
        const examples = Object.values<{ value: unknown }>(response.content['application/json'].examples ?? {});
        expect(examples.length, `${path} ${status}`).toBeGreaterThan(0);
        for (const example of examples)
          expect(contractViolations(path, Number(status), example.value), `${path} ${status}`).toEqual([]);
      }
    }
  });

  it('refuses answers that are not what it describes', () => {
    expect(
      contractViolations('/auth/user-profile', 200, {
        success: true,
        data: { message: 'x', user: { userID: 'USR_1' } },
      }),
    ).not.toEqual([]);
    expect(
      contractViolations('/auth/child-accounts', 400, {
        success: false,
        error: { code: 'INVALID_LIMIT', message: 'm', extra: 1 },
      }),
    ).not.toEqual([]);
    expect(
      contractViolations('/auth/child-accounts', 400, { success: false, error: { code: 'NOT_A_CODE', message: 'm' } }),
    ).not.toEqual([]);
    expect(
      contractViolations('/parent/credit-analysis', 418, {
        success: false,
        error: { code: 'INTERNAL_ERROR', message: 'm' },
      }),
    ).not.toEqual([]);
    expect(
      contractViolations('/auth/child-accounts', 400, {
        success: false,
        error: { code: 'INVALID_LIMIT', message: 'm' },
      }),
    ).toEqual([]);
  });
});

describe(`/openapi.json and /docs (${testMode})`, () => {
  const database = useTestDatabase();
  const server = useServer(database, { env: { NODE_ENV: 'production' } });

  it('serves the document, and the reference page with every asset it loads from this server, in production too', async () => {
    const document = await rest(server(), '/openapi.json');
    expect(document.status).toBe(200);
    expect(document.headers.get('content-type')).toMatch(/^application\/json/);
    expect(document.body).toEqual(JSON.parse(JSON.stringify(openApiDocument())));
    const page = await raw(`${server().url}/docs`);
    expect(page.status).toBe(200);
    expect(page.headers['content-type']).toMatch(/^text\/html/);
    const html = page.body.toString();
    // Offline: nothing from another origin.
    expect(html).not.toMatch(/(src|href)="(https?:)?\/\//);
    const assets = [...html.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]!);
    expect(assets).toEqual(
      expect.arrayContaining(['/docs/swagger-ui.css', '/docs/swagger-ui-bundle.js', '/docs/init.js']),
    );
    for (const asset of assets) {
      const answer = await raw(`${server().url}${asset}`);
      expect(answer.status, asset).toBe(200);
      expect(answer.body.length, asset).toBeGreaterThan(100);
    }
    const init = (await raw(`${server().url}/docs/init.js`)).body.toString();
    expect(init).toContain("url: '/openapi.json'");
    expect(init).toContain('validatorUrl: null');
  });

  it('sends the large assets gzipped to clients that accept it, and refuses other methods and unknown asset names', async () => {
    const plain = await raw(`${server().url}/docs/swagger-ui-bundle.js`);
    const zipped = await raw(`${server().url}/docs/swagger-ui-bundle.js`, { 'accept-encoding': 'gzip, deflate' });
    expect(zipped.headers['content-encoding']).toBe('gzip');
    expect(zipped.body.length).toBeLessThan(plain.body.length / 2);
    expect(gunzipSync(zipped.body).equals(plain.body)).toBe(true);
    expect(plain.headers['content-encoding']).toBeUndefined();
    const post = await rest(server(), '/openapi.json', { method: 'POST' });
    expect(post.status).toBe(405);
    expect(post.headers.get('allow')).toBe('GET, HEAD');
    expect(post.body.error.code).toBe('METHOD_NOT_ALLOWED');
    for (const path of ['/docs/package.json', '/docs/../package.json', '/docs/swagger-ui-bundle.js.map', '/docs/']) {
      expect((await rest(server(), path)).status, path).toBe(404);
    }
  });
});
