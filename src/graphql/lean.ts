import { getOperationAST, type ExecutionResult } from 'graphql';
import type { Exchange } from '../http/exchange.js';
import { regularMediaType, sendResult, type RegularMediaType } from './http.js';
import { resolvePersistedOperation, type GraphQLParams, type PersistedRule } from './persisted.js';
import type { GraphQLPipeline } from './pipeline.js';

/*
 * The lean GraphQL door: what API clients send (a JSON operation by POST, or a query string by
 * GET, answered as JSON) runs straight through the pipeline on node:http, with no fetch Request
 * or Response in between. Anything else it does not take, and the full server (yoga.ts) answers:
 * GraphiQL, event streams and multipart answers, form bodies, batches, and every malformed request
 * (so that its refusals are Yoga's own, word for word).
 */

const MEMBERS = new Set(['query', 'variables', 'operationName', 'extensions']);

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

/** The members of a request body or query string when they are well formed, else undefined. */
function wellFormed(candidate: unknown): GraphQLParams | undefined {
  if (!isObject(candidate)) return undefined;
  for (const key in candidate) if (candidate[key] != null && !MEMBERS.has(key)) return undefined;
  const { query, variables, operationName, extensions } = candidate;
  if (query != null && typeof query !== 'string') return undefined;
  if (variables != null && !isObject(variables)) return undefined;
  if (operationName != null && typeof operationName !== 'string') return undefined;
  if (extensions != null && !isObject(extensions)) return undefined;
  return candidate as GraphQLParams;
}

/** A JSON body by its Content-Type, as Yoga recognises one (the first of a list, exactly). */
function isJsonBody(contentType: string | undefined): boolean {
  const first = contentType?.split(',')[0];
  if (!first) return false;
  return ['application/json', 'application/graphql+json'].some((type) => first === type || first.startsWith(`${type};`));
}

/** JSON text's value; undefined when it does not parse (JSON has no undefined of its own). */
function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** GET: the members from the query string, as Yoga reads them (an empty member is absent). */
function fromQueryString(query: string): GraphQLParams | undefined {
  const search = new URLSearchParams(query);
  const member = (name: string) => search.get(name) || undefined;
  const candidate: Record<string, unknown> = { operationName: member('operationName'), query: member('query') };
  for (const name of ['variables', 'extensions']) {
    const text = member(name);
    if (text === undefined) continue;
    const value = parseJson(text);
    // Unparsable: Yoga's refusal, word for word.
    if (value === undefined) return undefined;
    candidate[name] = value;
  }
  return wellFormed(candidate);
}

export type LeanDoor = (exchange: Exchange, body: Buffer | undefined) => Promise<boolean>;

export function createLeanDoor(pipeline: GraphQLPipeline, options: { graphiql: boolean; persisted: PersistedRule }): LeanDoor {
  /** The request's operation and media type, when the lean door takes it. */
  function take(exchange: Exchange, body: Buffer | undefined): { params: GraphQLParams; mediaType: RegularMediaType } | undefined {
    const method = exchange.request.method;
    const accept = exchange.header('accept');
    const mediaType = regularMediaType(accept);
    if (mediaType === null) return undefined;
    let params: GraphQLParams | undefined;
    if (method === 'GET') {
      // A browser asking for a page gets GraphiQL.
      if (options.graphiql && accept?.includes('text/html')) return undefined;
      params = fromQueryString(exchange.query);
    } else if (method === 'POST' && body?.length && isJsonBody(exchange.header('content-type'))) {
      params = wellFormed(parseJson(body.toString('utf8')));
    }
    return params && { params, mediaType };
  }

  async function execute(exchange: Exchange, params: GraphQLParams): Promise<ExecutionResult | undefined> {
    try {
      params = resolvePersistedOperation(params, options.persisted, exchange.record);
      const enveloped = pipeline.getEnveloped({ exchange, params } as never);
      const document = enveloped.parse(params.query!);
      const errors = enveloped.validate(enveloped.schema, document);
      if (errors.length > 0) return { errors };
      // Subscriptions stream: the full server's transport answers them.
      if (getOperationAST(document, params.operationName)?.operation === 'subscription') return undefined;
      const contextValue = await enveloped.contextFactory();
      return (await enveloped.execute({
        schema: enveloped.schema,
        document,
        contextValue,
        variableValues: params.variables,
        operationName: params.operationName,
      })) as ExecutionResult;
    } catch (error) {
      return { errors: [pipeline.maskError(error)] };
    }
  }

  return async function serveLean(exchange, body) {
    const taken = take(exchange, body);
    if (!taken) return false;
    const result = await execute(exchange, taken.params);
    if (!result) return false;
    sendResult(exchange, result, taken.mediaType);
    return true;
  };
}
