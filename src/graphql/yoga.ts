import { getOperationAST, GraphQLError, type DocumentNode, type ExecutionArgs } from 'graphql';
import { getVariableValues } from 'graphql/execution/values.js';
import { EnvelopArmorPlugin } from '@escape.tech/graphql-armor';
import { useGraphQlJit } from '@envelop/graphql-jit';
import { useDisableIntrospection } from '@graphql-yoga/plugin-disable-introspection';
import { createYoga } from 'graphql-yoga';
import { LRUCache } from 'lru-cache';
import { createRequestContext, requestIdFrom, type AppDependencies, type RequestContext } from '../context.js';
import { ApiError, innermostError, toApiError } from '../errors.js';
import type { Logger } from '../logger.js';
import { GRAPHIQL_DEFAULT_DOCUMENT, PERSISTED_OPERATIONS } from './operations.js';
import { usePersistedOperations } from '@graphql-yoga/plugin-persisted-operations';
import { useObserve } from './observe.js';
import { schema } from './schema.js';
import type { Observed } from '../rest/http.js';

type ServerContext = { requestId?: string; observed?: Observed };

/**
 * Executions of one document before it is compiled (graphql-jit): the documents real clients send
 * again and again run as compiled functions; a document sent a few times, or one of a caller
 * making up a new document per request, is executed as usual and costs no compilation.
 */
const COMPILE_AFTER_EXECUTIONS = 20;
/**
 * Parsed documents kept (Yoga's default is 1,024). A compiled document lives as long as its
 * parsed one, so this also bounds the compiled functions held.
 */
const DOCUMENTS_KEPT = 256;

/**
 * Whether this execution runs compiled: a query (graphql-jit reports other operation types, and
 * variables of the wrong type, in shapes of its own: those stay with the reference executor, whose
 * answers the contract fixes) whose document has been executed often enough. Executions are
 * counted per parsed document: Yoga's parse cache hands back the same object for the same text.
 */
function compileWhenRepeated(): (args: ExecutionArgs) => boolean {
  const executions = new WeakMap<DocumentNode, number>();
  return ({ document, operationName, schema, variableValues }) => {
    const count = (executions.get(document) ?? 0) + 1;
    if (count <= COMPILE_AFTER_EXECUTIONS) {
      executions.set(document, count);
      return false;
    }
    const operation = getOperationAST(document, operationName);
    if (operation?.operation !== 'query') return false;
    const variables = operation.variableDefinitions ?? [];
    return variables.length === 0 || getVariableValues(schema, variables, variableValues ?? {}).errors === undefined;
  };
}

export type GraphQLHandler = ReturnType<typeof createGraphQLHandler>;

/** GraphQL over HTTP at /graphql, with GraphiQL when enabled. */
export type GraphQLHandlerOptions = {
  /** JSON of the headers GraphiQL opens with (development: a demo parent's token). */
  graphiqlHeaders?: string;
};

export function createGraphQLHandler(deps: AppDependencies, logger: Logger, options: GraphQLHandlerOptions = {}) {
  let graphiqlPage: Promise<string> | undefined;
  return createYoga<ServerContext, RequestContext>({
    schema,
    graphqlEndpoint: '/graphql',
    graphiql: deps.config.graphiql
      ? {
          title: 'Credits read API',
          defaultQuery: GRAPHIQL_DEFAULT_DOCUMENT,
          // A demo token in the headers tab: development only (see main.ts), never in production.
          ...(options.graphiqlHeaders && deps.config.env === 'development' ? { headers: options.graphiqlHeaders } : {}),
        }
      : false,
    // GraphiQL's page and assets from the npm package, not from a CDN: it works offline. Loaded
    // on first use: the bundle is tens of megabytes in memory, and production serves no GraphiQL.
    // Its options never change, so the page is rendered once (and compressed once, see http.ts).
    renderGraphiQL: (graphiqlOptions) =>
      (graphiqlPage ??= import('@graphql-yoga/render-graphiql').then((module) => module.renderGraphiQL(graphiqlOptions))),
    landingPage: false,
    batching: false,
    parserAndValidationCache: { documentCache: new LRUCache<string, DocumentNode>({ max: DOCUMENTS_KEPT, ttl: 3_600_000 }) },
    // The body arrives already read and capped (MAX_BODY_BYTES, 413 in app.ts): Yoga's own limit
    // would stream it again through a transform for nothing.
    maxRequestBodySize: false,
    plugins: [
      // Refused before any resolver runs; the messages do not reveal the limits.
      EnvelopArmorPlugin({
        maxDepth: { n: 6, exposeLimits: false },
        maxAliases: { n: 15, exposeLimits: false },
        maxDirectives: { n: 50, exposeLimits: false },
        maxTokens: { n: 1000, exposeLimits: false },
        costLimit: { maxCost: 5000, exposeLimits: false },
        blockFieldSuggestion: { enabled: deps.config.env !== 'development' },
      }),
      ...(deps.config.introspection ? [] : [useDisableIntrospection()]),
      // Stored documents by id (operations.ts); GRAPHQL_PERSISTED_ONLY refuses any other document.
      usePersistedOperations({
        getPersistedOperation: (id) => PERSISTED_OPERATIONS.get(id) ?? null,
        allowArbitraryOperations: !deps.config.persistedOperationsOnly,
        customErrors: {
          notFound: {
            message: 'No stored operation has this id (extensions.persistedQuery.sha256Hash).',
            extensions: { code: 'PERSISTED_QUERY_NOT_FOUND', http: { status: 400 } },
          },
          persistedQueryOnly: {
            message: 'This server runs stored operations only: send extensions.persistedQuery.sha256Hash instead of a query.',
            extensions: { code: 'PERSISTED_QUERY_ONLY', http: { status: 400 } },
          },
          keyNotFound: {
            message: 'Send a query, or a stored operation id in extensions.persistedQuery.sha256Hash.',
            extensions: { code: 'BAD_REQUEST', http: { status: 400 } },
          },
        },
      }),
      useGraphQlJit({}, { enableIf: compileWhenRepeated(), onError: () => {} }),
      useObserve(logger),
    ],
    cors: {
      origin: deps.config.corsOrigins === '*' ? '*' : deps.config.corsOrigins,
      credentials: false,
      allowedHeaders: ['Authorization', 'Content-Type', 'X-Public-Key', 'X-Request-Id'],
      exposedHeaders: ['X-Request-Id'],
    },
    logging: false,
    context: ({ request, requestId, observed }) =>
      createRequestContext(
        deps,
        {
          authorization: request.headers.get('authorization'),
          publicKey: request.headers.get('x-public-key'),
        },
        requestId ?? requestIdFrom(request.headers.get('x-request-id')),
        observed,
      ),
    maskedErrors: {
      // Expected errors reach the client with their contract code; everything else is masked.
      maskError: (error) => {
        const original = innermostError(error);
        const located = error as Partial<Pick<GraphQLError, 'nodes' | 'path' | 'extensions'>>;
        const graphQLShaped = (value: unknown): value is GraphQLError =>
          value instanceof Error && 'extensions' in value && typeof value.extensions === 'object';
        if (!(original instanceof ApiError) && located.path === undefined && graphQLShaped(error) && graphQLShaped(original)) {
          // The request's own faults (parse, validation, variables, operation choice), not a
          // resolver's: the client's to read, with a code where the rule that refused gave none.
          // Only the code (and Yoga's status hint, which it does not send) reach the client:
          // parsers attach the thrown error's name and message, which are not for clients. Yoga
          // answers such an error with its own status even to application/json clients; without
          // the attachment, the status hint must say so itself (no "spec" marker).
          const { code, originalError } = error.extensions;
          let { http } = error.extensions as { http?: Record<string, unknown> };
          if (originalError !== undefined && http?.['spec']) {
            const { spec: _spec, ...rest } = http;
            http = rest;
          }
          return new GraphQLError(error.message, {
            nodes: error.nodes,
            source: error.source,
            positions: error.positions,
            extensions: { code: typeof code === 'string' ? code : 'GRAPHQL_VALIDATION_FAILED', ...(http === undefined ? {} : { http }) },
          });
        }
        // Resolver errors that are not the API's own were logged, with the request id, by useObserve.
        const apiError = original instanceof ApiError ? original : toApiError(original);
        return new GraphQLError(apiError.message, {
          nodes: located.nodes,
          path: located.path,
          extensions: { code: apiError.code },
        });
      },
    },
  });
}
