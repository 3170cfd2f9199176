-- Announcements carry the id of the transaction that made the change ("x", pg_current_xact_id()),
-- and a child's update of its activity columns carries its last login before and after ("l" and
-- "n", epoch milliseconds or null).
-- With "x", a cached read that took its snapshot after that transaction committed (its
-- pg_current_snapshot() sees the id) is known to hold the change already: it is kept when the
-- announcement arrives, and a read that overlapped the announcement may still be stored. Under a
-- steady stream of sign-ins this is what lets an organization's balance and usage stay cached
-- between one sign-in and the next.
-- With "l" and "n", a sign-in of a child who had logged in recently does not drop the parent's
-- cached child counts: that child was counted as active before and still is.

CREATE OR REPLACE FUNCTION "api_cache_announce"(entity text, keys jsonb) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  item jsonb;
  version bigint := pg_current_xact_id()::text::bigint;
BEGIN
  IF keys IS NULL OR jsonb_array_length(keys) = 0 THEN
    RETURN;
  END IF;
  IF jsonb_array_length(keys) > 500 THEN
    PERFORM pg_notify('api_cache', jsonb_build_object('t', entity, 'all', true, 'x', version)::text);
    RETURN;
  END IF;
  FOR item IN SELECT value FROM jsonb_array_elements(keys) LOOP
    PERFORM pg_notify('api_cache', (jsonb_build_object('t', entity, 'x', version) || item)::text);
  END LOOP;
END $$;

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
    SELECT jsonb_agg(DISTINCT jsonb_strip_nulls(jsonb_build_object('id', id, 'k', k, 'p', p, 's', s, 'l', l, 'n', n))) INTO keys FROM (
      SELECT n."id" AS id, n."publicKey" AS k, n."parentId" AS p,
             (o."id" IS NULL OR (to_jsonb(n) - activity) IS DISTINCT FROM (to_jsonb(o) - activity)) AS s,
             (extract(epoch FROM o."lastLogin") * 1000)::float8 AS l,
             (extract(epoch FROM n."lastLogin") * 1000)::float8 AS n
      FROM new_rows n LEFT JOIN old_rows o ON o."id" = n."id"
      WHERE o."id" IS NULL OR to_jsonb(n) IS DISTINCT FROM to_jsonb(o)
      UNION
      SELECT o."id", o."publicKey", o."parentId", true, NULL::float8, NULL::float8
      FROM old_rows o LEFT JOIN new_rows n ON n."id" = o."id"
      WHERE n."id" IS NULL OR n."publicKey" IS DISTINCT FROM o."publicKey" OR n."parentId" IS DISTINCT FROM o."parentId"
    ) changed;
  END IF;
  PERFORM "api_cache_announce"('account', keys);
  RETURN NULL;
END $$;
