import { GraphQLError } from 'graphql';
import { LRUCache } from 'lru-cache';
import type { RequestRecord } from '../context.js';
import { operationId, PERSISTED_OPERATIONS } from './operations.js';

/** Documents registered by Automatic Persisted Queries: at most this many bytes in all. */
const REGISTERED_BYTES = 4 * 1024 * 1024;
const MAX_DOCUMENT_BYTES = 64 * 1024;

/** What a credential may register: this many documents a window. */
export type RegistrationBudget = { perCredential: number; windowMs: number };
export const DEFAULT_REGISTRATION_BUDGET: RegistrationBudget = { perCredential: 50, windowMs: 10 * 60_000 };
/** Credentials whose spent budget is remembered at once (least recently registering forgotten first). */
const BUDGETS_TRACKED = 20_000;

/**
 * Automatic Persisted Queries as Apollo's link speaks them. A document is registered under its hash
 * once its request is answered, only for a verified credential within its budget, per instance and
 * bounded in bytes.
 */
export class RegisteredOperations {
  private readonly documents: LRUCache<string, string>;
  /** Registrations spent by each credential in its current window. */
  private readonly spent: LRUCache<string, { count: number }>;
  /** Documents registered, and offers refused: the caller was not verified, or its budget was spent. */
  readonly stats = { registered: 0, unverified: 0, overBudget: 0 };

  constructor(
    private readonly budget: RegistrationBudget = DEFAULT_REGISTRATION_BUDGET,
    /** The memory budget's share for registered documents. */
    maxBytes = REGISTERED_BYTES,
  ) {
    this.documents = new LRUCache<string, string>({
      maxSize: Math.max(maxBytes, MAX_DOCUMENT_BYTES),
      maxEntrySize: MAX_DOCUMENT_BYTES,
      sizeCalculation: (document, id) => document.length * 2 + id.length + 64,
    });
    this.spent = new LRUCache({ max: BUDGETS_TRACKED, ttl: budget.windowMs, noUpdateTTL: true });
  }

  get(id: string): string | undefined {
    return this.documents.get(id);
  }

  /** Settles a request's offer once it is answered: registered when its caller verified and has budget left. */
  settle(record: RequestRecord): void {
    const offer = record.registration;
    if (offer === undefined) return;
    record.registration = undefined;
    if (this.documents.has(offer.id)) return;
    if (record.viewer === undefined) {
      this.stats.unverified += 1;
      return;
    }
    const spent = this.spent.get(record.viewer) ?? { count: 0 };
    if (spent.count >= this.budget.perCredential) {
      this.stats.overBudget += 1;
      return;
    }
    spent.count += 1;
    if (spent.count === 1) this.spent.set(record.viewer, spent);
    if (offer.document.length <= MAX_DOCUMENT_BYTES / 2) this.documents.set(offer.id, offer.document);
    this.stats.registered += 1;
  }

  get size(): number {
    return this.documents.size;
  }

  /** Estimated bytes of the documents registered. */
  get bytes(): number {
    return this.documents.calculatedSize;
  }
}

/** How a transport treats operation ids: stored operations only, or registered ones too. */
export type PersistedRule = { persistedOnly: boolean; registered: RegisteredOperations };

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
  const persisted = params.extensions?.['persistedQuery'] as
    { version?: unknown; sha256Hash?: unknown } | null | undefined;
  if (
    persisted == null ||
    typeof persisted !== 'object' ||
    persisted.version !== 1 ||
    typeof persisted.sha256Hash !== 'string'
  )
    return undefined;
  return persisted.sha256Hash;
}

/**
 * Stored operations (operations.ts), for both transports; with GRAPHQL_PERSISTED_ONLY any document sent
 * as text is refused (400).
 */
export function resolvePersistedOperation(
  params: GraphQLParams,
  rule: PersistedRule,
  record: RequestRecord,
): GraphQLParams {
  const { persistedOnly } = rule;
  const refuse = (code: string, message: string) => {
    record.code = code;
    return refusal(code, message);
  };
  if (params.query) {
    if (persistedOnly) {
      throw refuse(
        'PERSISTED_QUERY_ONLY',
        'This server runs stored operations only: send extensions.persistedQuery.sha256Hash instead of a query.',
      );
    }
    const sent = persistedId(params);
    if (sent !== undefined) {
      if (!/^[0-9a-f]{64}$/.test(sent) || operationId(params.query) !== sent) {
        throw refuse(
          'PERSISTED_QUERY_HASH_MISMATCH',
          'extensions.persistedQuery.sha256Hash is not the hex SHA-256 of the query sent.',
        );
      }
      // Registered once the request is answered, if its caller verified (RegisteredOperations.settle).
      if (!PERSISTED_OPERATIONS.has(sent)) record.registration = { id: sent, document: params.query };
    }
    return params;
  }
  const id = persistedId(params);
  if (id === undefined)
    throw refuse('BAD_REQUEST', 'Send a query, or a stored operation id in extensions.persistedQuery.sha256Hash.');
  const document = PERSISTED_OPERATIONS.get(id) ?? (persistedOnly ? undefined : rule.registered.get(id));
  if (document === undefined)
    throw refuse(
      'PERSISTED_QUERY_NOT_FOUND',
      'No stored operation has this id (extensions.persistedQuery.sha256Hash).',
    );
  record.persisted = true;
  return {
    query: document,
    operationName: params.operationName,
    variables: params.variables,
    extensions: params.extensions,
  };
}
