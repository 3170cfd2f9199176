import type { GraphQLParams } from './persisted.js';

/* The lean transport's reading of a request's GraphQL parameters; what is not well formed is Yoga's to refuse. */

const MEMBERS = new Set(['query', 'variables', 'operationName', 'extensions']);

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** The members of a request body or query string when they are well formed, else undefined. */
export function wellFormed(candidate: unknown): GraphQLParams | undefined {
  if (!isObject(candidate)) return undefined;
  for (const key in candidate) if (candidate[key] != null && !MEMBERS.has(key)) return undefined;
  const { query, variables, operationName, extensions } = candidate;
  if (query != null && typeof query !== 'string') return undefined;
  if (variables != null && !isObject(variables)) return undefined;
  if (operationName != null && typeof operationName !== 'string') return undefined;
  if (extensions != null && !isObject(extensions)) return undefined;
  return candidate as GraphQLParams;
}

/** A JSON body by its Content-Type, as Yoga recognises one. */
const JSON_BODY = /^application\/(?:graphql\+)?json(?:[;,]|$)/;

export function isJsonBody(contentType: string | undefined): boolean {
  return contentType !== undefined && JSON_BODY.test(contentType);
}

/** JSON text's value; undefined when it does not parse (JSON has no undefined of its own). */
export function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** GET: the members from the query string, as Yoga reads them (an empty member is absent). */
export function fromQueryString(query: string): GraphQLParams | undefined {
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

/** Bodies remembered, and the largest remembered: a few documents make most of the traffic. */
const BODIES_REMEMBERED = 16;
const MAX_REMEMBERED_BODY = 4096;

/**
 * The JSON bodies sent most recently, by their bytes: a body equal to one remembered is not parsed
 * again, and its document is the string already known (with its hash). A fixed number of slots, taken
 * in turn; not an LRU, whose key would be the very text or hash saved.
 */
export class RecentBodies {
  private readonly slots: { body: Buffer; params: GraphQLParams }[] = [];
  private next = 0;

  get(body: Buffer): GraphQLParams | undefined {
    // `equals` compares the lengths first.
    for (const slot of this.slots) if (slot.body.equals(body)) return slot.params;
    return undefined;
  }

  remember(body: Buffer, params: GraphQLParams): GraphQLParams {
    if (body.length > MAX_REMEMBERED_BODY) return params;
    const slot = { body: Buffer.from(body), params: deepFreeze(params) };
    this.slots[this.next] = slot;
    this.next = (this.next + 1) % BODIES_REMEMBERED;
    return slot.params;
  }
}

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const member of Object.values(value)) deepFreeze(member);
  }
  return value;
}
