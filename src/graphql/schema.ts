import { isAbstractType, lexicographicSortSchema, printSchema } from 'graphql';
import { builder } from './builder.js';
import './scalars.js';
import './account.js';
import './organization.js';
import './child-accounts.js';
import './credit-analysis.js';
import './subscriptions.js';
import './node.js';

builder.queryType({ description: 'The read API: profile, organization, child accounts and credit analysis.' });

export const schema = builder.toSchema({ sortSchema: true });

/** The SDL committed as schema.graphql. */
export function printedSchema(): string {
  return `${printSchema(lexicographicSortSchema(schema))}\n`;
}

/**
 * Each interface's (and union's) object types, as Apollo Client's `possibleTypes` and urql's
 * graphcache take them: committed as `possible-types.json` beside this file, so that fragments on
 * `Account` and `Node` match without the client reading the schema.
 */
export function possibleTypes(): Record<string, string[]> {
  const map: Record<string, string[]> = {};
  for (const type of Object.values(schema.getTypeMap()).sort((a, b) => a.name.localeCompare(b.name))) {
    if (isAbstractType(type) && !type.name.startsWith('__'))
      map[type.name] = schema
        .getPossibleTypes(type)
        .map((t) => t.name)
        .sort();
  }
  return map;
}
