import { getOperationAST, type ExecutionResult } from 'graphql';
import type { RequestContext } from '../context.js';
import { answerOf, MAX_ANSWER_KEY_LENGTH, type Answer, type AnswerCache, type Keep } from '../db/answer-cache.js';
import type { Exchange } from '../exchange.js';
import { endSpan, recording, startOperationSpan } from '../ops/tracing.js';
import { regularMediaType, sendAnswer, sendResult, serialiseResult, type RegularMediaType } from './http.js';
import { resolvePersistedOperation, type GraphQLParams, type PersistedRule } from './persisted.js';
import { showsOrganizationOnly, type PlannedQuery } from './documents.js';
import type { GraphQLPipeline } from './pipeline.js';
import { wantsEventStream, type EventStreams } from './event-stream.js';
import { operationKey } from './observe.js';
import { fromQueryString, isJsonBody, parseJson, RecentBodies, wellFormed } from './params.js';

/*
 * The lean GraphQL door: what API clients send (a JSON operation by POST, or a query string by
 * GET, answered as JSON) runs straight through the pipeline on node:http, with no fetch Request
 * or Response in between. Anything else it does not take, and the full server (yoga.ts) answers:
 * GraphiQL, event streams and multipart answers, form bodies, batches, and every malformed request
 * (so that its refusals are Yoga's own, word for word).
 *
 * A query's answer is kept (`db/answer-cache.ts`) under its document, variables and viewer (or,
 * for an operation that shows the organization alone, the organization's readers the viewer is
 * one of) when it has no errors and was computed from the cache's entries alone, and served
 * again, as the bytes first sent, while none of them changed: the credentials are verified again
 * for every request (the viewer is part of the key), the retrievals it shows are counted again,
 * and nothing else of the pipeline runs.
 */

/** An execution's result, whether its operation was a query, and the operation's name in the document. */
type Outcome = { result: ExecutionResult; query: boolean; name?: string | undefined };

export type LeanDoor = (exchange: Exchange, body: Buffer | undefined) => Promise<boolean>;

export type LeanDoorOptions = {
  graphiql: boolean;
  persisted: PersistedRule;
  /** Where answers are kept; none: every request runs the pipeline. */
  answers?: AnswerCache;
  /** The clock kept answers are checked against (epoch ms). */
  now: () => number;
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

export function createLeanDoor(pipeline: GraphQLPipeline, options: LeanDoorOptions): LeanDoor {
  const { answers, now } = options;
  const bodies = new RecentBodies();
  const { documents } = pipeline;

  /**
   * The key of a query's answer for `viewer`; undefined when it is too long to be worth keeping,
   * or when JSON cannot say its variables as sent.
   */
  function answerKey(document: number, params: GraphQLParams, viewer: string): string | undefined {
    const variables = params.variables == null ? '' : JSON.stringify(params.variables);
    // A number past the doubles (`1e400`) was read as Infinity, which JSON writes as null: keyed
    // that way, it would be served the answer kept for a null instead of its own error.
    if (variables.includes('null') && holdsNonFinite(params.variables)) return undefined;
    const key = `${document}\n${operationKey(params.operationName)}\n${viewer}\n${variables}`;
    return key.length <= MAX_ANSWER_KEY_LENGTH ? key : undefined;
  }

  /** The request's operation, when it is one the lean door reads. */
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

  /** The request's operation and media type, when the lean door takes it. */
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
   * The result, and whether the operation was a query; undefined for a subscription (not the lean
   * door's). A query operation that runs compiled runs as planned from then on: the pipeline's
   * parse and validation outcomes for its document are known, and its hooks' orchestration is
   * what the plan saves.
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
      // Subscriptions stream: the full server's transport answers them.
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

  /**
   * Whether the answer may be kept: a query's result without errors, for a request whose operation
   * verified its viewer (what it read is the answer cache's to judge, see `Keep`).
   */
  function keepable(outcome: Outcome, exchange: Exchange): boolean {
    const { result, query } = outcome;
    return query && !result.errors?.length && result.extensions === undefined && exchange.record.caller !== undefined;
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
    if (!answers?.enabled || !params.query) {
      const outcome = await execute(exchange, params);
      if (!outcome) return false;
      sendResult(exchange, outcome.result, taken.mediaType);
      return true;
    }
    const context = pipeline.context(exchange);
    const query = params.query;
    const document = documents.notes(query);
    const operation = operationKey(params.operationName);
    // An operation that shows the organization alone is kept once for its readers, not per viewer.
    const organizationOnly = document?.organizationOnly.get(operation) === true;
    const viewer = organizationOnly ? await context.organizationAudience() : await context.viewerKey();
    const key = viewer === undefined || document === undefined ? undefined : answerKey(document.id, params, viewer);
    const served = async (answer: Answer, context: RequestContext) => {
      // A kept answer: its span says so, and has nothing under it.
      if (recording())
        endSpan(
          startOperationSpan('query', document?.names.get(operation) ?? params.operationName, 'kept', answer.label),
        );
      await context.replay(answer, exchange.record);
      sendAnswer(exchange, answer, taken.mediaType);
      return true;
    };
    const compute = async (context: RequestContext, keep: Keep | undefined) => {
      const outcome = await execute(exchange, params, context);
      if (!outcome) return false;
      const make = () =>
        answerOf(serialiseResult(outcome.result), {
          label: exchange.record.operation,
          retrievals: [...context.retrieved],
          validUntil: context.reads.validUntil,
        });
      let kept: Answer | undefined;
      if (keep && keepable(outcome, exchange)) {
        // What the operation's answers are for: the viewer, or the organization's readers.
        let alone = organizationOnly;
        let audience = viewer;
        if (document?.organizationOnly.has(operation) !== true) {
          const parsed = documents.parsed.get(query);
          alone = parsed !== undefined && showsOrganizationOnly(parsed, params.operationName);
          if (alone) audience = await context.organizationAudience();
        }
        // A document is given an id once an answer to it may be kept; its key is named then.
        kept = keep(make, () => {
          const known = documents.noted(query);
          known.names.set(operation, outcome.name);
          known.organizationOnly.set(operation, alone);
          // The key asked for, unless it was the viewer's and the answers turn out to be the readers'.
          if (key !== undefined && alone === organizationOnly) return key;
          return audience === undefined ? undefined : answerKey(known.id, params, audience);
        });
      }
      if (kept) sendAnswer(exchange, kept, taken.mediaType);
      else sendResult(exchange, outcome.result, taken.mediaType);
      return true;
    };
    const viewerOf = organizationOnly ? (fresh: RequestContext) => fresh.organizationAudience() : undefined;
    return answers.serve(
      { key, viewer, viewerOf, context, fresh: () => pipeline.context(exchange), now },
      served,
      compute,
    );
  };
}
