import {
  getOperationAST,
  GraphQLError,
  NoSchemaIntrospectionCustomRule,
  parse,
  specifiedRules,
  validate,
  type DocumentNode,
  type ExecutionResult,
} from 'graphql';
import { getVariableValues } from 'graphql/execution/values.js';
import {
  envelop,
  useEngine,
  useExtendContext,
  useMaskedErrors,
  useSchema,
  type GetEnvelopedFn,
  type Plugin,
} from '@envelop/core';
import { useParserCache } from '@envelop/parser-cache';
import { useValidationCache } from '@envelop/validation-cache';
import { normalizedExecutor } from '@graphql-tools/executor';
import { EnvelopArmorPlugin } from '@escape.tech/graphql-armor';
import { DocumentCache, type PlannedQuery } from './documents.js';
import { RequestCache } from '@pothos/plugin-scope-auth';
import { createRequestContext, type AppDependencies, type RequestContext } from '../context.js';
import { ApiError, innermostError, toApiError } from '../errors.js';
import type { Exchange } from '../exchange.js';
import type { Logger } from '../logger.js';
import { endSpan, startOperationSpan, inSpan } from '../ops/tracing.js';
import { asReference, useCompiledExecution, type ExecutionCounts } from './compiled.js';
import { observeErrors, observedIn, operationLabel, spanFailure, useObserve, useTracing } from './observe.js';
import type { GraphQLParams } from './persisted.js';
import { schema } from './schema.js';

/*
 * The one GraphQL pipeline: a single envelop instance, built once, with one plugin list, one
 * context factory and one error mask. Both transports run every operation through it: the lean transport
 * (lean.ts) calls it directly, Yoga (yoga.ts) receives it whole with `useEnvelop`. A rule of this
 * API lives in an envelop hook here (parse, validate, context, execute), never in a hook only one
 * transport has. The shortcuts are the pipeline's own: a query that already went through every hook
 * and runs compiled runs again from its plan (`runPlanned`), which does what the execute phase's
 * hooks do without their orchestration; its parse and validation outcomes depend on the
 * document alone, so they are those of its first run. And a subscription on the lean event
 * stream (`event-stream.ts`) is parsed, validated and given its context by the hooks, then
 * executes each event as graphql-js does, finished by `settle` as the execute hooks finish one.
 */

/**
 * What each transport hands the pipeline: the request's exchange (credentials, request id, record), and
 * the request's context when the transport made it already (the lean transport does, for a shared answer).
 */
export type GraphQLInitialContext = { exchange: Exchange; prepared?: RequestContext };
export type GraphQLContext = GraphQLInitialContext & RequestContext;

/**
 * Executions of one document before it is compiled (graphql-jit): the documents real clients send
 * again and again run as compiled functions; a document sent a few times, or one of a caller
 * making up a new document per request, is executed as usual and costs no compilation.
 */
const COMPILE_AFTER_EXECUTIONS = 20;

/** What an error tells the HTTP answer (`extensions.http`, as Yoga reads it): its status and headers. */
export type HttpHint = { status?: number; spec?: boolean; headers?: Record<string, string> };

function httpHint(error: GraphQLError): HttpHint {
  const extensions = error.extensions as Record<string, unknown>;
  return ((extensions['http'] as HttpHint | undefined) ??= {});
}

/**
 * GraphQL over HTTP's rules for the request's own faults, as the specification and Yoga have
 * them: a document that does not parse is 400 `GRAPHQL_PARSE_FAILED`; one that names no
 * operation to run is 400 `OPERATION_RESOLUTION_FAILURE`; a mutation by GET is 405; a document
 * that fails validation is 400 `GRAPHQL_VALIDATION_FAILED`. The status hints are read by the transports
 * (application/graphql-response+json answers with them; application/json only with those not
 * marked `spec`) and never sent.
 */
function useHttpSemantics(): Plugin<GraphQLInitialContext> {
  return {
    onParse({ context }) {
      return ({ result }) => {
        if (result instanceof GraphQLError) {
          const extensions = result.extensions as Record<string, unknown>;
          extensions['code'] ||= 'GRAPHQL_PARSE_FAILED';
          const http = httpHint(result);
          http.spec ||= true;
          http.status ||= 400;
          return;
        }
        if (result instanceof Error || result === null) return;
        const operationName = (context as { params?: { operationName?: string } }).params?.operationName;
        const operation = getOperationAST(result, operationName);
        if (!operation) {
          throw new GraphQLError('Could not determine what operation to execute.', {
            extensions: { code: 'OPERATION_RESOLUTION_FAILURE', http: { status: 400 } },
          });
        }
        if (operation.operation === 'mutation' && context.exchange.request.method === 'GET') {
          throw new GraphQLError('Can only perform a mutation operation from a POST request.', {
            extensions: { http: { status: 405, headers: { Allow: 'POST' } }, code: 'BAD_REQUEST' },
          });
        }
      };
    },
    onValidate() {
      return ({ valid, result }) => {
        if (valid) return;
        for (const error of result) {
          const extensions = error.extensions as Record<string, unknown>;
          extensions['code'] ||= 'GRAPHQL_VALIDATION_FAILED';
          const http = httpHint(error);
          http.spec ??= true;
          http.status ||= 400;
        }
      };
    },
  };
}

/**
 * Scope-auth's per-request cache is dropped once the operation's result is known. It lives in a
 * WeakMap keyed by the request's context and refers to that context: V8's young-generation
 * collector keeps such an entry's value alive while the map holds it, so, left to the WeakMap,
 * every GraphQL request's objects (context, loaders, results) would survive until the next full
 * collection. Measured: several times the garbage collection of a REST request, and a full
 * collection every second under load (test/bench/README.md).
 */
export function releaseRequestCaches(contextValue: unknown): void {
  if (typeof contextValue === 'object' && contextValue !== null) RequestCache.clearForContext(contextValue);
}

function useReleaseRequestCaches(): Plugin {
  return {
    onExecute() {
      return {
        onExecuteDone({ args }) {
          releaseRequestCaches(args.contextValue);
        },
      };
    },
  };
}

/** Introspection off (production default): the validation rule refuses `__schema` and `__type`. */
function useNoIntrospection(): Plugin {
  return {
    onValidate({ addValidationRule }) {
      addValidationRule(NoSchemaIntrospectionCustomRule);
    },
  };
}

const graphQLShaped = (value: unknown): value is GraphQLError =>
  value instanceof Error && 'extensions' in value && typeof value.extensions === 'object';

/**
 * The one error mask. Expected errors reach the client with their contract code; the request's
 * own faults (parse, validation, variables, operation choice) with their message and code;
 * everything else as the API's error mapping has it (503 for an outage, else 500), masked.
 * Idempotent: an error it made is returned as it is, so that masking twice changes nothing.
 */
export function createErrorMask(): (error: unknown) => GraphQLError {
  const masked = new WeakSet<object>();
  const mark = (error: GraphQLError): GraphQLError => {
    masked.add(error);
    return error;
  };
  return (error) => {
    if (typeof error === 'object' && error !== null && masked.has(error)) return error as GraphQLError;
    const original = innermostError(error);
    const located = error as Partial<Pick<GraphQLError, 'nodes' | 'locations' | 'path' | 'extensions'>>;
    if (
      !(original instanceof ApiError) &&
      located.path === undefined &&
      graphQLShaped(error) &&
      graphQLShaped(original)
    ) {
      // Only the code (and the status hint, which is never sent) reach the client: parsers attach
      // the thrown error's name and message, which are not for clients. Such an error is answered
      // with its own status even to application/json clients; without the attachment, the hint
      // must say so itself (no "spec" marker).
      const { code, originalError } = error.extensions;
      let { http } = error.extensions as { http?: Record<string, unknown> };
      if (originalError !== undefined && http?.['spec']) {
        const { spec: _spec, ...rest } = http;
        http = rest;
      }
      return mark(
        new GraphQLError(error.message, {
          nodes: error.nodes,
          source: error.source,
          positions: error.positions,
          extensions: {
            code: typeof code === 'string' ? code : 'GRAPHQL_VALIDATION_FAILED',
            ...(http === undefined ? {} : { http }),
          },
        }),
      );
    }
    // Resolver errors that are not the API's own were logged, with the request id, by useObserve.
    const apiError = original instanceof ApiError ? original : toApiError(original);
    const { retryAfterSeconds } = apiError;
    const extensions =
      retryAfterSeconds === undefined ? { code: apiError.code } : { code: apiError.code, retryAfterSeconds };
    const answer = new GraphQLError(apiError.message, { nodes: located.nodes, path: located.path, extensions });
    // A compiled execution's errors carry their locations without the nodes they came from.
    if (answer.locations === undefined && located.locations?.length)
      (answer as { locations?: GraphQLError['locations'] }).locations = located.locations;
    return mark(answer);
  };
}

export type GraphQLPipeline = {
  getEnveloped: GetEnvelopedFn<GraphQLContext>;
  /**
   * The plan of a query operation of a document that this pipeline parsed, validated and executed
   * compiled; undefined for anything else (a mutation, a document not compiled yet or that does
   * not compile).
   */
  plan: (document: DocumentNode, operationName: string | null | undefined) => PlannedQuery | undefined;
  /**
   * Runs a planned query for a request as the pipeline's execute phase does, without the hooks'
   * orchestration (whose parse and validation outcomes the plan holds): the same context, the
   * operation's label and first error code recorded, unexpected resolver errors logged, compiled
   * execution counted, errors masked. Undefined when the variables do not fit the operation
   * (the whole pipeline answers those, in the reference executor's words).
   */
  runPlanned: (
    plan: PlannedQuery,
    initial: GraphQLInitialContext & { params: GraphQLParams },
  ) => Promise<ExecutionResult> | undefined;
  /**
   * What the execute phase's hooks do once a result is known, for an execution made outside them
   * (a planned query, a subscription's push on the lean event stream): the request's caches
   * released, unexpected errors logged with the request id, errors masked.
   */
  settle: (contextValue: object, result: ExecutionResult) => ExecutionResult;
  /** The error mask, for what fails outside execution (a transport's own refusals, a thrown parse error). */
  maskError: (error: unknown) => GraphQLError;
  /** Executions by engine since the start. */
  executions: ExecutionCounts;
  /** The one context factory, for a transport that needs the request's context before the pipeline runs. */
  context: (exchange: Exchange) => RequestContext;
  /**
   * What is known of each document text: its parse and validation, and the lean transport's notes. A
   * compiled document lives as long as its parsed one, so its bound also bounds the compiled
   * functions held.
   */
  documents: DocumentCache;
};

/**
 * graphql-js' validation with each rule once: the full server adds the specified rules too when
 * it takes the pipeline in, and a rule listed twice reports every error twice.
 */
const validateOnce: typeof validate = (schema, document, rules, options, typeInfo) =>
  validate(schema, document, rules && [...new Set(rules)], options, typeInfo);

export function createGraphQLPipeline(
  deps: AppDependencies,
  logger: Logger,
  options: { compileAfter?: number } = {},
): GraphQLPipeline {
  const maskError = createErrorMask();
  const executions: ExecutionCounts = { compiled: 0, reference: 0, compileFailures: 0 };
  const compiledExecution = useCompiledExecution({
    compileAfter: options.compileAfter ?? COMPILE_AFTER_EXECUTIONS,
    logger,
    counts: executions,
  });
  const contextOf = ({ exchange, prepared }: GraphQLInitialContext): RequestContext =>
    prepared ?? createRequestContext(deps, exchange);
  const documents = new DocumentCache();
  const plugins: Plugin<any>[] = [
    useEngine({
      parse,
      validate: validateOnce,
      specifiedRules,
      execute: normalizedExecutor,
      subscribe: normalizedExecutor,
    }),
    useSchema(schema),
    // Refused before any resolver runs; the messages do not reveal the limits.
    EnvelopArmorPlugin({
      maxDepth: { n: 6, exposeLimits: false },
      maxAliases: { n: 15, exposeLimits: false },
      maxDirectives: { n: 50, exposeLimits: false },
      maxTokens: { n: 1000, exposeLimits: false },
      costLimit: { maxCost: 5000, exposeLimits: false },
      blockFieldSuggestion: { enabled: deps.config.env !== 'development' },
    }),
    ...(deps.config.introspection ? [] : [useNoIntrospection()]),
    // One cache by document text for the parse, the validation and the lean transport's notes (documents.ts).
    useParserCache({ documentCache: documents.parsed, errorCache: documents.parseErrors }),
    useValidationCache({ cache: documents.validations }),
    useHttpSemantics(),
    compiledExecution,
    // After the compiled execution: the span wraps whichever execution runs.
    useTracing(),
    useObserve(logger),
    useReleaseRequestCaches(),
    useExtendContext(contextOf),
    useMaskedErrors({ maskError: (error) => maskError(error) }),
  ];
  /** Made once per document and operation: the lean transport keeps the plans it runs. */
  function plan(document: DocumentNode, operationName: string | null | undefined): PlannedQuery | undefined {
    const query = compiledExecution.compiledQuery(document, operationName);
    const operation = query && getOperationAST(document, operationName);
    if (!query || operation?.operation !== 'query') return undefined;
    return {
      label: operationLabel(document, operationName),
      name: operation.name?.value,
      variables: operation.variableDefinitions ?? [],
      query,
    };
  }

  function runPlanned(
    planned: PlannedQuery,
    initial: GraphQLInitialContext & { params: GraphQLParams },
  ): Promise<ExecutionResult> | undefined {
    const variables = initial.params.variables ?? {};
    if (planned.variables.length > 0 && getVariableValues(schema, planned.variables, variables).errors !== undefined)
      return undefined;
    // The context as envelop builds it: the initial one, extended with the request's.
    const contextValue = Object.assign(initial, contextOf(initial));
    const observed = observedIn(contextValue);
    if (observed) observed.operation = planned.label;
    executions.compiled += 1;
    const span = startOperationSpan('query', planned.name, 'plan', planned.label);
    return Promise.resolve(inSpan(span, () => planned.query.query(undefined, contextValue, variables))).then((raw) => {
      const result = settle(contextValue, asReference(raw));
      endSpan(span, spanFailure(result));
      return result;
    });
  }

  function settle(contextValue: object, result: ExecutionResult): ExecutionResult {
    releaseRequestCaches(contextValue);
    if (!result.errors?.length) return result;
    observeErrors(logger, contextValue, result.errors);
    return { ...result, errors: result.errors.map((error) => maskError(error)) };
  }

  return {
    getEnveloped: envelop({ plugins }) as unknown as GetEnvelopedFn<GraphQLContext>,
    plan,
    runPlanned,
    settle,
    maskError,
    executions,
    context: (exchange) => createRequestContext(deps, exchange),
    documents,
  };
}
