-- Change notifications for the API's in-process cache of accounts, organizations, purchases and
-- monthly usage. Every committed change to those rows, whoever makes it, is announced on the
-- channel "api_cache" as JSON: {"t": <entity>, "id": <key>} (accounts also carry "k", their public
-- key, and "p", their parent's id or null), or {"t": <entity>, "all": true} after a bulk change. NOTIFY is delivered at commit, so a
-- rolled-back change announces nothing. Statement-level triggers: a bulk insert sends one message.

CREATE FUNCTION "api_cache_announce"(entity text, keys jsonb) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  item jsonb;
BEGIN
  IF keys IS NULL OR jsonb_array_length(keys) = 0 THEN
    RETURN;
  END IF;
  IF jsonb_array_length(keys) > 500 THEN
    PERFORM pg_notify('api_cache', jsonb_build_object('t', entity, 'all', true)::text);
    RETURN;
  END IF;
  FOR item IN SELECT value FROM jsonb_array_elements(keys) LOOP
    PERFORM pg_notify('api_cache', (jsonb_build_object('t', entity) || item)::text);
  END LOOP;
END $$;

CREATE FUNCTION "api_cache_account"() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  keys jsonb;
BEGIN
  IF TG_OP = 'INSERT' THEN
    SELECT jsonb_agg(DISTINCT jsonb_build_object('id', "id", 'k', "publicKey", 'p', "parentId")) INTO keys FROM new_rows;
  ELSIF TG_OP = 'DELETE' THEN
    SELECT jsonb_agg(DISTINCT jsonb_build_object('id', "id", 'k', "publicKey", 'p', "parentId")) INTO keys FROM old_rows;
  ELSE
    SELECT jsonb_agg(DISTINCT jsonb_build_object('id', "id", 'k', "publicKey", 'p', "parentId")) INTO keys
    FROM (SELECT "id", "publicKey", "parentId" FROM new_rows UNION SELECT "id", "publicKey", "parentId" FROM old_rows) changed;
  END IF;
  PERFORM "api_cache_announce"('account', keys);
  RETURN NULL;
END $$;

-- The retrieval counter's own writes (decisions §3) change nothing the API caches: not announced.
CREATE FUNCTION "api_cache_organization"() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  keys jsonb;
BEGIN
  IF TG_OP = 'INSERT' THEN
    SELECT jsonb_agg(DISTINCT jsonb_build_object('id', "parentId")) INTO keys FROM new_rows;
  ELSIF TG_OP = 'DELETE' THEN
    SELECT jsonb_agg(DISTINCT jsonb_build_object('id', "parentId")) INTO keys FROM old_rows;
  ELSE
    SELECT jsonb_agg(DISTINCT jsonb_build_object('id', id)) INTO keys FROM (
      SELECT n."parentId" AS id FROM new_rows n LEFT JOIN old_rows o ON o."parentId" = n."parentId"
      WHERE o."parentId" IS NULL
         OR (to_jsonb(n) - 'detailsRetrievalCount' - 'lastDetailsRetrievalAt')
            IS DISTINCT FROM (to_jsonb(o) - 'detailsRetrievalCount' - 'lastDetailsRetrievalAt')
      UNION
      SELECT o."parentId" FROM old_rows o LEFT JOIN new_rows n ON n."parentId" = o."parentId"
      WHERE n."parentId" IS NULL
    ) changed;
  END IF;
  PERFORM "api_cache_announce"('organization', keys);
  RETURN NULL;
END $$;

CREATE FUNCTION "api_cache_by_organization"() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  keys jsonb;
BEGIN
  IF TG_OP = 'INSERT' THEN
    SELECT jsonb_agg(DISTINCT jsonb_build_object('id', "organizationId")) INTO keys FROM new_rows;
  ELSIF TG_OP = 'DELETE' THEN
    SELECT jsonb_agg(DISTINCT jsonb_build_object('id', "organizationId")) INTO keys FROM old_rows;
  ELSE
    SELECT jsonb_agg(DISTINCT jsonb_build_object('id', id)) INTO keys
    FROM (SELECT "organizationId" AS id FROM new_rows UNION SELECT "organizationId" FROM old_rows) changed;
  END IF;
  PERFORM "api_cache_announce"(TG_ARGV[0], keys);
  RETURN NULL;
END $$;

CREATE FUNCTION "api_cache_truncate"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('api_cache', jsonb_build_object('t', TG_ARGV[0], 'all', true)::text);
  RETURN NULL;
END $$;

CREATE TRIGGER "api_cache_account_insert" AFTER INSERT ON "Account"
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION "api_cache_account"();
CREATE TRIGGER "api_cache_account_update" AFTER UPDATE ON "Account"
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION "api_cache_account"();
CREATE TRIGGER "api_cache_account_delete" AFTER DELETE ON "Account"
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION "api_cache_account"();
CREATE TRIGGER "api_cache_account_truncate" AFTER TRUNCATE ON "Account"
  FOR EACH STATEMENT EXECUTE FUNCTION "api_cache_truncate"('account');

CREATE TRIGGER "api_cache_organization_insert" AFTER INSERT ON "Organization"
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION "api_cache_organization"();
CREATE TRIGGER "api_cache_organization_update" AFTER UPDATE ON "Organization"
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION "api_cache_organization"();
CREATE TRIGGER "api_cache_organization_delete" AFTER DELETE ON "Organization"
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION "api_cache_organization"();
CREATE TRIGGER "api_cache_organization_truncate" AFTER TRUNCATE ON "Organization"
  FOR EACH STATEMENT EXECUTE FUNCTION "api_cache_truncate"('organization');

CREATE TRIGGER "api_cache_purchases_insert" AFTER INSERT ON "PackagePurchase"
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION "api_cache_by_organization"('purchases');
CREATE TRIGGER "api_cache_purchases_update" AFTER UPDATE ON "PackagePurchase"
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION "api_cache_by_organization"('purchases');
CREATE TRIGGER "api_cache_purchases_delete" AFTER DELETE ON "PackagePurchase"
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION "api_cache_by_organization"('purchases');
CREATE TRIGGER "api_cache_purchases_truncate" AFTER TRUNCATE ON "PackagePurchase"
  FOR EACH STATEMENT EXECUTE FUNCTION "api_cache_truncate"('purchases');

CREATE TRIGGER "api_cache_usage_insert" AFTER INSERT ON "MonthlyUsage"
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION "api_cache_by_organization"('usage');
CREATE TRIGGER "api_cache_usage_update" AFTER UPDATE ON "MonthlyUsage"
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION "api_cache_by_organization"('usage');
CREATE TRIGGER "api_cache_usage_delete" AFTER DELETE ON "MonthlyUsage"
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION "api_cache_by_organization"('usage');
CREATE TRIGGER "api_cache_usage_truncate" AFTER TRUNCATE ON "MonthlyUsage"
  FOR EACH STATEMENT EXECUTE FUNCTION "api_cache_truncate"('usage');
