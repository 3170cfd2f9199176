import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { CompressedPayload, type Exchange } from '../exchange.js';
import { openApiDocument } from './openapi.js';

/*
 * The REST description and its reference page: GET /openapi.json (OpenAPI 3.1) and GET /docs
 * (Swagger UI, from the swagger-ui-dist package: no CDN, it works offline). Public, like the
 * schema: they describe the API, and hold no data.
 */

export const OPENAPI_PATH = '/openapi.json';
export const DOCS_PATH = '/docs';

const PAGE = `<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Credits read API: REST reference</title>
  <link rel="icon" type="image/png" href="/docs/favicon-32x32.png">
  <link rel="stylesheet" href="/docs/swagger-ui.css">
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="/docs/swagger-ui-bundle.js"></script>
  <script src="/docs/swagger-ui-standalone-preset.js"></script>
  <script src="/docs/init.js"></script>
</body>
</html>
`;

// No validator badge: it would send the document to an outside service.
const INIT = `window.ui = SwaggerUIBundle({
  url: '${OPENAPI_PATH}',
  dom_id: '#swagger-ui',
  deepLinking: true,
  validatorUrl: null,
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset],
  layout: 'StandaloneLayout',
});
`;

type Asset = { contentType: string; load: () => Buffer };

const fromPackage = (file: string) => () => {
  const folder = path.dirname(createRequire(import.meta.url).resolve('swagger-ui-dist/package.json'));
  return readFileSync(path.join(folder, file));
};

/** Every path served here, and nothing else: no file name from the request reaches the disk. */
const ASSETS: Record<string, Asset> = {
  [OPENAPI_PATH]: {
    contentType: 'application/json; charset=utf-8',
    load: () => Buffer.from(JSON.stringify(openApiDocument())),
  },
  [DOCS_PATH]: { contentType: 'text/html; charset=utf-8', load: () => Buffer.from(PAGE) },
  '/docs/init.js': { contentType: 'text/javascript; charset=utf-8', load: () => Buffer.from(INIT) },
  '/docs/swagger-ui.css': { contentType: 'text/css; charset=utf-8', load: fromPackage('swagger-ui.css') },
  '/docs/swagger-ui-bundle.js': {
    contentType: 'text/javascript; charset=utf-8',
    load: fromPackage('swagger-ui-bundle.js'),
  },
  '/docs/swagger-ui-standalone-preset.js': {
    contentType: 'text/javascript; charset=utf-8',
    load: fromPackage('swagger-ui-standalone-preset.js'),
  },
  '/docs/favicon-32x32.png': { contentType: 'image/png', load: fromPackage('favicon-32x32.png') },
};

/** Payloads below this size are sent as they are. */
const COMPRESS_FROM_BYTES = 1024;

/** Loaded on first request and kept: a fixed set of files, about 2.5 MB together. */
const loaded = new Map<string, CompressedPayload>();

/** Every path served here. */
export const DOCS_PATHS: readonly string[] = Object.keys(ASSETS);

/** One of `DOCS_PATHS`, with its cached payload (gzipped for clients that accept it). */
export async function serveDocs(exchange: Exchange): Promise<void> {
  const target = exchange.path;
  const asset = ASSETS[target]!;
  let payload = loaded.get(target);
  if (!payload) {
    payload = new CompressedPayload(asset.load());
    loaded.set(target, payload);
  }
  exchange.addHeaders({ 'Cache-Control': 'public, max-age=300', Vary: 'Accept-Encoding' });
  return exchange.sendCompressible(200, asset.contentType, payload, COMPRESS_FROM_BYTES);
}
