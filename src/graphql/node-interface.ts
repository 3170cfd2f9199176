import { builder } from './builder.js';

/*
 * Global Object Identification (the GraphQL specification's Relay appendix): every entity a client
 * caches has a globally unique `id`, and `node(id)` fetches one again, so that Apollo Client, urql's
 * graphcache and Relay normalise without configuration. An id is base64 of `<Type>:<key>`: the
 * account's userID, the organization's public key (both already in the contract).
 */

export type NodeKind = 'Account' | 'Organization';

export function globalId(kind: NodeKind, key: string): string {
  return Buffer.from(`${kind}:${key}`, 'utf8').toString('base64');
}

/** The kind and key of a global id; undefined when it is not one this API made. */
export function parseGlobalId(id: string): { kind: NodeKind; key: string } | undefined {
  if (id.length > 256 || !/^[A-Za-z0-9+/]+={0,2}$/.test(id)) return undefined;
  const text = Buffer.from(id, 'base64').toString('utf8');
  const at = text.indexOf(':');
  const kind = text.slice(0, at);
  if (at === -1 || (kind !== 'Account' && kind !== 'Organization')) return undefined;
  return globalId(kind, text.slice(at + 1)) === id ? { kind, key: text.slice(at + 1) } : undefined;
}

/** What `node` answers: an account's profile or the organization's details. */
type NodeValue =
  | { accountType: 'parent' | 'child'; userID: string }
  | { organizationName: string; credentials: { publicKey: string } };

export const Node = builder.interfaceRef<NodeValue>('Node').implement({
  description: 'An object with a globally unique id, fetched again by `node(id)` (Global Object Identification).',
  resolveType: (value) =>
    'accountType' in value ? (value.accountType === 'parent' ? 'ParentAccount' : 'ChildAccount') : 'Organization',
  fields: (t) => ({
    id: t.id({
      description: 'A globally unique, opaque id.',
      resolve: (value) =>
        'accountType' in value
          ? globalId('Account', value.userID)
          : globalId('Organization', value.credentials.publicKey),
    }),
  }),
});
