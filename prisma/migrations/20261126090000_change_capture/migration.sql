-- The API adds no work to the transactions of the services that write this database. Its cache
-- learns of committed changes from PostgreSQL's logical replication stream (the publication below,
-- decoded by the walsender after commit), not from triggers inside every writer's transaction.
-- Where logical replication is not available (wal_level below logical, a role without
-- REPLICATION, the embedded database) the server installs its announcement triggers itself at
-- start (src/db/capture/triggers.ts); a migration no longer does.

-- The announcement triggers and their functions.
DROP TRIGGER IF EXISTS "api_cache_account_insert" ON "Account";
DROP TRIGGER IF EXISTS "api_cache_account_update" ON "Account";
DROP TRIGGER IF EXISTS "api_cache_account_delete" ON "Account";
DROP TRIGGER IF EXISTS "api_cache_account_truncate" ON "Account";
DROP TRIGGER IF EXISTS "api_cache_organization_insert" ON "Organization";
DROP TRIGGER IF EXISTS "api_cache_organization_update" ON "Organization";
DROP TRIGGER IF EXISTS "api_cache_organization_delete" ON "Organization";
DROP TRIGGER IF EXISTS "api_cache_organization_truncate" ON "Organization";
DROP TRIGGER IF EXISTS "api_cache_purchases_insert" ON "PackagePurchase";
DROP TRIGGER IF EXISTS "api_cache_purchases_update" ON "PackagePurchase";
DROP TRIGGER IF EXISTS "api_cache_purchases_delete" ON "PackagePurchase";
DROP TRIGGER IF EXISTS "api_cache_purchases_truncate" ON "PackagePurchase";
DROP TRIGGER IF EXISTS "api_cache_usage_insert" ON "MonthlyUsage";
DROP TRIGGER IF EXISTS "api_cache_usage_update" ON "MonthlyUsage";
DROP TRIGGER IF EXISTS "api_cache_usage_delete" ON "MonthlyUsage";
DROP TRIGGER IF EXISTS "api_cache_usage_truncate" ON "MonthlyUsage";
DROP FUNCTION IF EXISTS "api_cache_account"();
DROP FUNCTION IF EXISTS "api_cache_organization"();
DROP FUNCTION IF EXISTS "api_cache_by_organization"();
DROP FUNCTION IF EXISTS "api_cache_truncate"();
DROP FUNCTION IF EXISTS "api_cache_announce"(text, jsonb);

-- The child count kept in Organization: the server counts a parent's children and keeps the count
-- current from the change stream instead.
DROP TRIGGER IF EXISTS "account_child_count_insert" ON "Account";
DROP TRIGGER IF EXISTS "account_child_count_delete" ON "Account";
DROP TRIGGER IF EXISTS "account_child_count_update" ON "Account";
DROP FUNCTION IF EXISTS "account_child_count_insert"();
DROP FUNCTION IF EXISTS "account_child_count_delete"();
DROP FUNCTION IF EXISTS "account_child_count_update"();
ALTER TABLE "Organization" DROP COLUMN "childCount";

-- The search copy: the child list searches Account through trigram indexes of its own.
DROP TRIGGER IF EXISTS "child_search_insert" ON "Account";
DROP TRIGGER IF EXISTS "child_search_update" ON "Account";
DROP FUNCTION IF EXISTS "child_search_insert"();
DROP FUNCTION IF EXISTS "child_search_update"();
DROP TABLE "ChildSearch";

-- CreateIndex
CREATE INDEX "Account_username_trgm_idx" ON "Account" USING GIN ("username" gin_trgm_ops);

-- CreateIndex
CREATE INDEX "Account_email_trgm_idx" ON "Account" USING GIN ("email" gin_trgm_ops);

-- The stream carries a changed row's old values where the cache needs them: whether an account's
-- identity or only its activity changed, a child's last login before a sign-in, an account's old
-- public key and parent, an organization's balance before, a purchase's organization.
-- MonthlyUsage's key already names its organization.
ALTER TABLE "Account" REPLICA IDENTITY FULL;
ALTER TABLE "Organization" REPLICA IDENTITY FULL;
ALTER TABLE "PackagePurchase" REPLICA IDENTITY FULL;

-- What the change stream publishes: the tables the API caches.
CREATE PUBLICATION "api_cache" FOR TABLE "Account", "Organization", "PackagePurchase", "MonthlyUsage";
