import { getOperationAST, type ExecutionResult } from 'graphql';
import type { RequestContext } from '../context.js';
import type { Exchange } from '../exchange.js';
import { endSpan, recording, startOperationSpan } from '../ops/tracing.js';
import { regularMediaType, sendAnswer, sendResult, serialiseResult, type RegularMediaType } from './http.js';
import { resolvePersistedOperation, type GraphQLParams, type PersistedRule } from './persisted.js';
import { showsOrganizationOnly } from './documents.js';
import type { GraphQLPipeline } from './pipeline.js';
import { wantsEventStream, type EventStreams } from './event-stream.js';
import { operationKey } from './observe.js';
import { fromQueryString, isJsonBody, parseJson, RecentBodies, wellFormed } from './params.js';

/*
 * The lean GraphQL transport: a JSON operation by POST or a query string by GET runs straight
 * through the pipeline on node:http, with no fetch Request or Response between. Anything else is the
 * full server's (yoga.ts), so that its refusals are Yoga's own. A query showing the organization
 * alone is answered as its readers share it (`RequestContext.sharedAnswer`).
 */

/** An execution's result, whether its operation was a query, and the operation's name in the document. */
type Outcome = { result: ExecutionResult; query: boolean; name?: string | undefined };

export type LeanTransport = (exchange: Exchange, body: Buffer | undefined) => Promise<boolean>;

export type LeanTransportOptions = {
  graphiql: boolean;
  persisted: PersistedRule;
  /** Subscriptions asked for as event streams; none: the full server streams them. */
  streams?: EventStreams;
};

/** Whether a parsed JSON value holds a number JSON cannot write (Infinity, from a literal too large). */
function holdsNonFinite(value: unknown): boolean {
  // Walked with a list, not by recursion: a hostile body nests as deep as its bytes allow.
  const pending: unknown[] = [value];
  while (pending.length > 0) {
    const next = pending.pop();
    if (typeof next === 'number' && !Number.isFinite(next)) return true;
    if (next !== null && typeof next === 'object')
      for (const member of Array.isArray(next) ? next : Object.values(next)) pending.push(member);
  }
  return false;
}

/** A name longer than this (large variables) is not held: the bytes are better spent on entries. */
const MAX_NAME_LENGTH = 2048;

export function createLeanTransport(pipeline: GraphQLPipeline, options: LeanTransportOptions): LeanTransport {
  const bodies = new RecentBodies();
  const { documents } = pipeline;

  /** The name of a query's shared answer; undefined when too long, or when JSON cannot say its variables. */
  function answerName(document: number, params: GraphQLParams): string | undefined {
    const variables = params.variables == null ? '' : JSON.stringify(params.variables);
    // A number past the doubles (`1e400`) was read as Infinity, which JSON writes as null: named
    // that way, it would be served the answer held for a null instead of its own error.
    if (variables.includes('null') && holdsNonFinite(params.variables)) return undefined;
    const name = `${document}\n${operationKey(params.operationName)}\n${variables}`;
    return name.length <= MAX_NAME_LENGTH ? name : undefined;
  }

  /** The request's operation, when it is one the lean transport reads. */
  function paramsOf(exchange: Exchange, body: Buffer | undefined): GraphQLParams | undefined {
    const method = exchange.request.method;
    if (method === 'GET') {
      // A browser asking for a page gets GraphiQL.
      if (options.graphiql && exchange.header('accept')?.includes('text/html')) return undefined;
      return fromQueryString(exchange.query);
    }
    if (method !== 'POST' || !body?.length || !isJsonBody(exchange.header('content-type'))) return undefined;
    const known = bodies.get(body);
    if (known !== undefined) return known;
    const params = wellFormed(parseJson(body.toString('utf8')));
    return params && bodies.remember(body, params);
  }

  /** The request's operation and media type, when the lean transport takes it. */
  function take(
    exchange: Exchange,
    body: Buffer | undefined,
  ): { params: GraphQLParams; mediaType: RegularMediaType } | undefined {
    const mediaType = regularMediaType(exchange.header('accept'));
    if (mediaType === null) return undefined;
    const params = paramsOf(exchange, body);
    return params && { params, mediaType };
  }

  /** A subscription asked for as an event stream: opened here, or left to the full server. */
  async function stream(exchange: Exchange, body: Buffer | undefined): Promise<boolean> {
    if (!options.streams) return false;
    const taken = paramsOf(exchange, body);
    if (!taken) return false;
    try {
      return await options.streams.serve(
        exchange,
        resolvePersistedOperation(taken, options.persisted, exchange.record),
      );
    } catch {
      // The full server says why, in its own words.
      return false;
    }
  }

  /**
   * The result, and whether the operation was a query (undefined for a subscription). A query that ran
   * compiled runs from its plan from then on, without the hooks' orchestration.
   */
  async function execute(
    exchange: Exchange,
    params: GraphQLParams,
    prepared?: RequestContext,
  ): Promise<Outcome | undefined> {
    try {
      const planned =
        params.query == null ? undefined : documents.notes(params.query)?.plans.get(operationKey(params.operationName));
      const ran = planned && pipeline.runPlanned(planned, { exchange, params, prepared });
      if (ran) return { result: await ran, query: true, name: planned.name };
      const enveloped = pipeline.getEnveloped({ exchange, params, prepared } as never);
      const document = enveloped.parse(params.query!);
      const errors = enveloped.validate(enveloped.schema, document);
      if (errors.length > 0) return { result: { errors }, query: false };
      const definition = getOperationAST(document, params.operationName);
      const operation = definition?.operation;
      if (operation === 'subscription') return undefined;
      const contextValue = await enveloped.contextFactory();
      const result = (await enveloped.execute({
        schema: enveloped.schema,
        document,
        contextValue,
        variableValues: params.variables,
        operationName: params.operationName,
      })) as ExecutionResult;
      if (operation === 'query' && !planned) {
        const plan = pipeline.plan(document, params.operationName);
        if (plan) documents.noted(params.query!).plans.set(operationKey(params.operationName), plan);
      }
      return { result, query: operation === 'query', name: definition?.name?.value };
    } catch (error) {
      return { result: { errors: [pipeline.maskError(error)] }, query: false };
    }
  }

  return async function serveLean(exchange, body) {
    if (wantsEventStream(exchange)) return stream(exchange, body);
    const taken = take(exchange, body);
    if (!taken) return false;
    let params: GraphQLParams;
    try {
      params = resolvePersistedOperation(taken.params, options.persisted, exchange.record);
    } catch (error) {
      sendResult(exchange, { errors: [pipeline.maskError(error)] }, taken.mediaType);
      return true;
    }
    const query = params.query;
    const operation = operationKey(params.operationName);
    const document = query == null ? undefined : documents.notes(query);
    const name = document?.organizationOnly.get(operation) === true ? answerName(document.id, params) : undefined;
    if (name === undefined) {
      const outcome = await execute(exchange, params);
      if (!outcome) return false;
      // A query that shows the organization alone is shared from its next request on.
      const parsed = outcome.query && !outcome.result.errors?.length ? documents.parsed.get(query!) : undefined;
      if (parsed !== undefined && document?.organizationOnly.has(operation) !== true)
        documents.noted(query!).organizationOnly.set(operation, showsOrganizationOnly(parsed, params.operationName));
      sendResult(exchange, outcome.result, taken.mediaType);
      return true;
    }
    const context = pipeline.context(exchange);
    let outcome: Outcome | undefined;
    let computed = false;
    const answer = await context.sharedAnswer(name, async () => {
      computed = true;
      outcome = await execute(exchange, params, context);
      const { result } = outcome ?? {};
      // Only a result without errors is shared, as the bytes sent.
      return result && !result.errors?.length && result.extensions === undefined
        ? Buffer.from(serialiseResult(result))
        : undefined;
    });
    if (answer === undefined) {
      if (!outcome) return false;
      sendResult(exchange, outcome.result, taken.mediaType);
      return true;
    }
    // A held answer: its span says so, with the operation's name in the document, and has nothing under it.
    if (!computed && recording()) {
      const parsed = documents.parsed.get(query!);
      const named = parsed && getOperationAST(parsed, params.operationName)?.name?.value;
      endSpan(startOperationSpan('query', named ?? params.operationName, 'kept', answer.label));
    }
    sendAnswer(exchange, answer, taken.mediaType);
    return true;
  };
}
