-- Announcements say whether a change touched what authentication relies on ("s": true) or only
-- the columns that change all the time (counters, last login, balances; "s": false). A sign-in
-- updates a child, its parent's organization-wide counters and the organization's balance: those
-- drop the cached rows, not the organization's signing key or the tokens verified with it.
-- Account: an account's identity (type, status, lock, parent, public key, ...) is everything but
-- the activity columns below. Organization: everything but the balances (and the retrieval
-- counter, which is not announced at all); a balance that reaches zero, or leaves it, is stable
-- news too (children of a depleted organization are refused). A row whose key columns change is announced under its
-- old keys too, as a stable change.

CREATE OR REPLACE FUNCTION "api_cache_account"() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  keys jsonb;
  activity CONSTANT text[] := ARRAY['childSignupCount', 'signInCount', 'emailConfirmationCount',
    'providerAAuthCount', 'providerBAuthCount', 'providerCAuthCount', 'providerDAuthCount',
    'lastLogin', 'lastLoginProvider', 'lastLoginAttempt', 'loginAttempts', 'updatedAt'];
BEGIN
  IF TG_OP = 'INSERT' THEN
    SELECT jsonb_agg(DISTINCT jsonb_build_object('id', "id", 'k', "publicKey", 'p', "parentId", 's', true)) INTO keys FROM new_rows;
  ELSIF TG_OP = 'DELETE' THEN
    SELECT jsonb_agg(DISTINCT jsonb_build_object('id', "id", 'k', "publicKey", 'p', "parentId", 's', true)) INTO keys FROM old_rows;
  ELSE
    SELECT jsonb_agg(DISTINCT jsonb_build_object('id', id, 'k', k, 'p', p, 's', s)) INTO keys FROM (
      SELECT n."id" AS id, n."publicKey" AS k, n."parentId" AS p,
             (o."id" IS NULL OR (to_jsonb(n) - activity) IS DISTINCT FROM (to_jsonb(o) - activity)) AS s
      FROM new_rows n LEFT JOIN old_rows o ON o."id" = n."id"
      WHERE o."id" IS NULL OR to_jsonb(n) IS DISTINCT FROM to_jsonb(o)
      UNION
      SELECT o."id", o."publicKey", o."parentId", true
      FROM old_rows o LEFT JOIN new_rows n ON n."id" = o."id"
      WHERE n."id" IS NULL OR n."publicKey" IS DISTINCT FROM o."publicKey" OR n."parentId" IS DISTINCT FROM o."parentId"
    ) changed;
  END IF;
  PERFORM "api_cache_announce"('account', keys);
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION "api_cache_organization"() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  keys jsonb;
  unannounced CONSTANT text[] := ARRAY['detailsRetrievalCount', 'lastDetailsRetrievalAt'];
  balances CONSTANT text[] := ARRAY['creditBalance', 'accountBalance', 'availableBalance', 'updatedAt'];
BEGIN
  IF TG_OP = 'INSERT' THEN
    SELECT jsonb_agg(DISTINCT jsonb_build_object('id', "parentId", 's', true)) INTO keys FROM new_rows;
  ELSIF TG_OP = 'DELETE' THEN
    SELECT jsonb_agg(DISTINCT jsonb_build_object('id', "parentId", 's', true)) INTO keys FROM old_rows;
  ELSE
    SELECT jsonb_agg(DISTINCT jsonb_build_object('id', id, 's', s)) INTO keys FROM (
      SELECT n."parentId" AS id,
             (o."parentId" IS NULL OR (to_jsonb(n) - unannounced - balances) IS DISTINCT FROM (to_jsonb(o) - unannounced - balances)
              OR (n."creditBalance" > 0) IS DISTINCT FROM (o."creditBalance" > 0)) AS s
      FROM new_rows n LEFT JOIN old_rows o ON o."parentId" = n."parentId"
      WHERE o."parentId" IS NULL OR (to_jsonb(n) - unannounced) IS DISTINCT FROM (to_jsonb(o) - unannounced)
      UNION
      SELECT o."parentId", true FROM old_rows o LEFT JOIN new_rows n ON n."parentId" = o."parentId"
      WHERE n."parentId" IS NULL
    ) changed;
  END IF;
  PERFORM "api_cache_announce"('organization', keys);
  RETURN NULL;
END $$;
