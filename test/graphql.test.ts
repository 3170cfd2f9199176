import { afterAll } from 'vitest';
import { closeSharedDatabase } from './helpers/database.js';

/*
 * The GraphQL roots (`me`, `organization`, `childAccounts`, `creditAnalysis`) and their
 * authorization, one file (one fork, one database): each describe block in graphql/ builds the
 * organizations its tests read.
 */
import './graphql/me.js';
import './graphql/organization-credits.js';
import './graphql/child-accounts.js';
import './graphql/credit-trends.js';
import './graphql/auth.js';

afterAll(closeSharedDatabase);
