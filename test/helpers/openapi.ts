import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { openApiDocument } from '../../src/rest/openapi.js';

/*
 * Every answer of the four REST paths that a test receives is checked against the OpenAPI
 * document the server publishes (see `rest()` in app.ts): the description cannot drift from the
 * code without a test failing.
 */

const addFormats = addFormatsModule as unknown as (ajv: Ajv2020) => void;
const DOCUMENT_ID = 'openapi.json';
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
const document = openApiDocument() as { paths: Record<string, { get: { responses: Record<string, unknown> } }> };
ajv.addSchema(document, DOCUMENT_ID);

const pointer = (...parts: string[]) => parts.map((p) => p.replace(/~/g, '~0').replace(/\//g, '~1')).join('/');
const validators = new Map<string, ValidateFunction>();

/** What is wrong with this answer of a documented path, by the document; [] when nothing. */
export function contractViolations(path: string, status: number, body: unknown): string[] {
  const responses = document.paths[path]?.get.responses;
  if (!responses) return [`${path} is not in the document`];
  if (!Object.hasOwn(responses, String(status))) return [`${path} does not document status ${status}`];
  // A documented answer without content (304) has no body.
  if (!(responses as Record<string, { content?: unknown }>)[String(status)]!.content)
    return body === undefined || body === null || body === ''
      ? []
      : [`${path} ${status} has a body but documents none`];
  const key = `${path} ${status}`;
  let validate = validators.get(key);
  if (!validate) {
    validate = ajv.compile({
      $ref: `${DOCUMENT_ID}#/${pointer('paths', path, 'get', 'responses', String(status), 'content', 'application/json', 'schema')}`,
    });
    validators.set(key, validate);
  }
  if (validate(body)) return [];
  return (validate.errors ?? []).map(
    (e) => `${e.instancePath || '(body)'} ${e.message ?? ''} ${JSON.stringify(e.params)}`,
  );
}

/** The documented path of a request target, if it is one of the four. */
export function documentedPath(target: string): string | undefined {
  const path = target.split('?')[0]!;
  return Object.hasOwn(document.paths, path) ? path : undefined;
}
