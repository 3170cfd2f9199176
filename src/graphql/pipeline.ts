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
 * The one GraphQL pipeline: one envelop instance, plugin list, context factory and error mask, which
 * both transports run (the lean transport directly, Yoga through `useEnvelop`). A rule of this API
 * lives in an envelop hook here, never in one transport. A query already run compiled runs again
 * from its plan (`runPlanned`), doing what the execute hooks do.
 */

/** What a transport hands the pipeline: the exchange, and the request's context if it made one already. */
export type GraphQLInitialContext = { exchange: Exchange; prepared?: RequestContext };
export type GraphQLContext = GraphQLInitialContext & RequestContext;

/** Executions of a document before it is compiled (graphql-jit): only documents clients repeat pay for compiling. */
const COMPILE_AFTER_EXECUTIONS = 20;

/** What an error tells the HTTP answer (`extensions.http`, as Yoga reads it): its status and headers. */
export type HttpHint = { status?: number; spec?: boolean; headers?: Record<string, string> };

function httpHint(error: GraphQLError): HttpHint {
  const extensions = error.extensions as Record<string, unknown>;
  return ((extensions['http'] as HttpHint | undefined) ??= {});
}

/**
 * GraphQL over HTTP's rules for the request's own faults (parse 400, no operation 400, mutation by
 * GET 405, validation 400). The transports read the status hints and never send them.
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
 * Drops scope-auth's per-request cache once the result is known: its WeakMap entry would keep each
 * request's objects alive until a full collection (figures: test/bench/README.md).
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
 * The one error mask: expected errors keep their contract code, the request's own faults their message
 * and code, anything else is masked (503 for an outage, else 500). Idempotent.
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
      // Only the code and the status hint reach the client, not the parser's attached error; such an
      // error keeps its own status even for application/json clients.
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

/** The pipeline both transports run. */
export type GraphQLPipeline = ReturnType<typeof createGraphQLPipeline>;

/** graphql-js' validation with each rule once: Yoga adds the specified rules too, and twice reports twice. */
const validateOnce: typeof validate = (schema, document, rules, options, typeInfo) =>
  validate(schema, document, rules && [...new Set(rules)], options, typeInfo);

export function createGraphQLPipeline(deps: AppDependencies, logger: Logger, options: { compileAfter?: number } = {}) {
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
    context: (exchange: Exchange) => createRequestContext(deps, exchange),
    documents,
  };
}
