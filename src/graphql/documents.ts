import { getOperationAST, Kind, type DocumentNode, type GraphQLError, type VariableDefinitionNode } from 'graphql';
import type { CompiledQuery } from 'graphql-jit';
import { LRUCache } from 'lru-cache';

/*
 * One cache of what is known of each GraphQL document text: its parse, its validation, and the lean
 * transport's notes, read through the views below so that one byte bound holds them all.
 */

/** The bound: about 140 documents of a dashboard's size, within the base reserve (`ops/memory-budget.ts`). */
export const DOCUMENT_CACHE_BYTES = 4 * 1024 * 1024;
/** Unused for an hour: forgotten, as envelop's own caches do. */
const DOCUMENT_TTL_MS = 3_600_000;
/** A parsed document holds about 63 bytes for each character of its text (measured with `parse`). */
const PARSED_BYTES_PER_CHARACTER = 64;
/** An entry's own objects, a parse error, a validation result: small beside a parsed document. */
const ENTRY_BYTES = 256;
const PART_BYTES = 1024;

/** A query that went through the whole pipeline before and runs compiled (see `GraphQLPipeline.runPlanned`). */
export type PlannedQuery = {
  readonly label: string;
  /** The operation's name in the document, if it has one (for its span). */
  readonly name: string | undefined;
  readonly variables: readonly VariableDefinitionNode[];
  readonly query: CompiledQuery;
};

/** What the lean transport notes of a document: an id for its shared answers' names, and its operations' plans. */
export type DocumentNotes = {
  id: number;
  plans: Map<string, PlannedQuery>;
  /** By operation: whether its answers show the caller's organization alone (`showsOrganizationOnly`). */
  organizationOnly: Map<string, boolean>;
};

type Entry = {
  document?: DocumentNode;
  parseError?: Error;
  /** By the schema's hash and the rules (see `textStart`). */
  validations?: Map<string, readonly GraphQLError[]>;
  notes?: DocumentNotes;
};

/** What envelop's caches take: a get and a set by key. */
export type KeyedCache<T> = { get(key: string): T | undefined; set(key: string, value: T): void };

function sizeOf(entry: Entry, text: string): number {
  return (
    ENTRY_BYTES +
    2 * text.length +
    (entry.document ? PARSED_BYTES_PER_CHARACTER * text.length : 0) +
    (entry.parseError ? PART_BYTES : 0) +
    (entry.validations ? PART_BYTES * entry.validations.size : 0) +
    (entry.notes ? PART_BYTES : 0)
  );
}

/**
 * Where the text starts in Envelop's validation key (schema hash, rule names and text joined by `|`).
 * A key of another shape is all text, so a format change costs sharing, never an answer.
 */
function textStart(key: string): number {
  const first = key.indexOf('|');
  const second = first === -1 ? -1 : key.indexOf('|', first + 1);
  return second + 1;
}

export class DocumentCache {
  private readonly entries: LRUCache<string, Entry>;
  private ids = 0;

  constructor(maxBytes = DOCUMENT_CACHE_BYTES) {
    this.entries = new LRUCache<string, Entry>({ maxSize: maxBytes, sizeCalculation: sizeOf, ttl: DOCUMENT_TTL_MS });
  }

  /** Changes the entry of `text` and sizes it again, as a new object (the LRU sizes only on `set`). */
  private update(text: string, change: (entry: Entry) => void): void {
    const entry: Entry = { ...this.entries.get(text) };
    change(entry);
    this.entries.set(text, entry);
  }

  /** Envelop's parser cache: parsed documents. */
  readonly parsed: KeyedCache<DocumentNode> = {
    get: (text) => this.entries.get(text)?.document,
    set: (text, document) => this.update(text, (entry) => (entry.document = document)),
  };

  /** Envelop's parser cache: the errors of texts that did not parse. */
  readonly parseErrors: KeyedCache<Error> = {
    get: (text) => this.entries.get(text)?.parseError,
    set: (text, error) => this.update(text, (entry) => (entry.parseError = error)),
  };

  /** Envelop's validation cache. */
  readonly validations: KeyedCache<readonly GraphQLError[]> = {
    get: (key) => {
      const at = textStart(key);
      return this.entries.get(key.slice(at))?.validations?.get(key.slice(0, at));
    },
    set: (key, errors) => {
      const at = textStart(key);
      this.update(key.slice(at), (entry) => (entry.validations ??= new Map()).set(key.slice(0, at), errors));
    },
  };

  /** What the lean transport noted of `text`, if it noted anything. */
  notes(text: string): DocumentNotes | undefined {
    return this.entries.get(text)?.notes;
  }

  /** What the lean transport noted of `text`, begun now (with a new id) if it was not yet. */
  noted(text: string): DocumentNotes {
    const notes = this.entries.get(text)?.notes;
    if (notes !== undefined) return notes;
    const made: DocumentNotes = { id: ++this.ids, plans: new Map(), organizationOnly: new Map() };
    this.update(text, (entry) => (entry.notes = made));
    return made;
  }

  /** Estimated bytes held. */
  get bytes(): number {
    return this.entries.calculatedSize;
  }

  get size(): number {
    return this.entries.size;
  }
}

/**
 * Whether every answer to the operation shows the caller's organization alone: a query whose root
 * selects `organization` and nothing else but `__typename` (a root fragment is not looked into).
 */
export function showsOrganizationOnly(document: DocumentNode, operationName: string | null | undefined): boolean {
  const operation = getOperationAST(document, operationName);
  if (operation?.operation !== 'query') return false;
  let organization = false;
  for (const selection of operation.selectionSet.selections) {
    if (selection.kind !== Kind.FIELD) return false;
    if (selection.name.value === 'organization') organization = true;
    else if (selection.name.value !== '__typename') return false;
  }
  return organization;
}
