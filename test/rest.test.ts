import { afterAll } from 'vitest';
import { closeSharedDatabase } from './helpers/database.js';

/*
 * The four documented REST paths and what they share, one file (one fork, one database): each
 * describe block in rest/ builds the organizations its tests read.
 */
import './rest/user-profile.js';
import './rest/organization-details.js';
import './rest/child-accounts.js';
import './rest/credit-analysis.js';
import './rest/general.js';

afterAll(closeSharedDatabase);
