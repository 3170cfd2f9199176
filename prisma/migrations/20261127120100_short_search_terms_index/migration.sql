-- The index of the short terms' grams (see the migration short_search_terms), built without
-- blocking writes: CONCURRENTLY, which cannot run in a transaction, so this file holds this one
-- statement and the migrator runs it on its own (`src/db/migrator.ts`). At a million children it
-- takes about a minute, during which sign-ins go on.
CREATE INDEX CONCURRENTLY "Account_parentId_search_grams_idx" ON "Account" USING GIN ("parentId" text_ops, "child_search_grams"(lower("username") || chr(1) || lower("email"))) WHERE "parentId" IS NOT NULL;
