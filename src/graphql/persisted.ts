import { GraphQLError } from 'graphql';
import type { RequestRecord } from '../context.js';
import { PERSISTED_OPERATIONS } from './operations.js';

/** The members of a GraphQL request (GraphQL over HTTP). */
export type GraphQLParams = {
  query?: string | null;
  variables?: Record<string, unknown> | null;
  operationName?: string | null;
  extensions?: Record<string, unknown> | null;
};

function refusal(code: string, message: string): GraphQLError {
  return new GraphQLError(message, { extensions: { code, http: { status: 400 } } });
}

/** The APQ id: `extensions.persistedQuery.sha256Hash` of version 1. */
function persistedId(params: GraphQLParams): string | undefined {
  const persisted = params.extensions?.['persistedQuery'] as { version?: unknown; sha256Hash?: unknown } | null | undefined;
  if (persisted == null || typeof persisted !== 'object' || persisted.version !== 1 || typeof persisted.sha256Hash !== 'string') return undefined;
  return persisted.sha256Hash;
}

/**
 * Stored operations (operations.ts), for both doors: a request that names one by id runs its
 * document; with GRAPHQL_PERSISTED_ONLY every document sent as text is refused, even one equal to
 * a stored one. Refusals are 400 with their code, recorded on the request's record.
 */
export function resolvePersistedOperation(params: GraphQLParams, persistedOnly: boolean, record: RequestRecord): GraphQLParams {
  const refuse = (code: string, message: string) => {
    record.code = code;
    return refusal(code, message);
  };
  if (params.query) {
    if (persistedOnly) {
      throw refuse('PERSISTED_QUERY_ONLY', 'This server runs stored operations only: send extensions.persistedQuery.sha256Hash instead of a query.');
    }
    return params;
  }
  const id = persistedId(params);
  if (id === undefined) throw refuse('BAD_REQUEST', 'Send a query, or a stored operation id in extensions.persistedQuery.sha256Hash.');
  const document = PERSISTED_OPERATIONS.get(id);
  if (document === undefined) throw refuse('PERSISTED_QUERY_NOT_FOUND', 'No stored operation has this id (extensions.persistedQuery.sha256Hash).');
  record.persisted = true;
  return { query: document, operationName: params.operationName, variables: params.variables, extensions: params.extensions };
}
