-- A sign-in changes a child's counters and last login, its parent's counters and the
-- organization's balance: no column any index holds. Without the index on the last login,
-- PostgreSQL updates those rows in place (a HOT update) and writes no index entry at all, so the
-- API's indexes cost the sign-in service nothing; the space kept free in each page (fillfactor)
-- is where the new row versions go. Counting a parent's active children walks the parent's
-- children instead (the count is cached and amended from the change stream). See
-- test/bench/README.md for the measured cost a sign-in.
DROP INDEX "Account_parentId_lastLogin_idx";
ALTER TABLE "Account" SET (fillfactor = 90);
ALTER TABLE "Organization" SET (fillfactor = 90);

-- The child search's trigram indexes hold the parent too (btree_gin), so a search that matches
-- few children of a large parent reads those children only, not every account with the name.
CREATE EXTENSION IF NOT EXISTS btree_gin;
DROP INDEX "Account_username_trgm_idx";
DROP INDEX "Account_email_trgm_idx";
CREATE INDEX "Account_parentId_username_trgm_idx" ON "Account" USING GIN ("parentId" text_ops, "username" gin_trgm_ops);
CREATE INDEX "Account_parentId_email_trgm_idx" ON "Account" USING GIN ("parentId" text_ops, "email" gin_trgm_ops);
