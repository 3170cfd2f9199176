import { lexicographicSortSchema, printSchema } from 'graphql';
import { builder } from './builder.js';
import './scalars.js';
import './account.js';
import './organization.js';
import './child-accounts.js';
import './credit-analysis.js';
import './subscriptions.js';

builder.queryType({ description: 'The read API: profile, organization, child accounts and credit analysis.' });

export const schema = builder.toSchema({ sortSchema: true });

/** The SDL committed as schema.graphql. */
export function printedSchema(): string {
  return `${printSchema(lexicographicSortSchema(schema))}\n`;
}
