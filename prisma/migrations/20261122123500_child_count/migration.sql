-- The number of each parent's children, kept by the database itself so that the profile and the
-- credit analysis read it instead of counting up to a million rows per request.
ALTER TABLE "Organization" ADD COLUMN "childCount" INTEGER NOT NULL DEFAULT 0;

UPDATE "Organization" o
SET "childCount" = c.n
FROM (SELECT "parentId", count(*)::int AS n FROM "Account" WHERE "parentId" IS NOT NULL GROUP BY "parentId") c
WHERE o."parentId" = c."parentId";

-- Statement-level triggers with transition tables: a bulk insert of 100,000 children updates
-- each organization row once, not 100,000 times.
CREATE FUNCTION "account_child_count_insert"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE "Organization" o SET "childCount" = o."childCount" + c.n
  FROM (SELECT "parentId", count(*)::int AS n FROM inserted WHERE "parentId" IS NOT NULL GROUP BY "parentId") c
  WHERE o."parentId" = c."parentId";
  RETURN NULL;
END $$;

CREATE FUNCTION "account_child_count_delete"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE "Organization" o SET "childCount" = o."childCount" - c.n
  FROM (SELECT "parentId", count(*)::int AS n FROM deleted WHERE "parentId" IS NOT NULL GROUP BY "parentId") c
  WHERE o."parentId" = c."parentId";
  RETURN NULL;
END $$;

CREATE FUNCTION "account_child_count_update"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE "Organization" o SET "childCount" = o."childCount" + c.n
  FROM (
    SELECT "parentId", sum(n)::int AS n FROM (
      SELECT "parentId", 1 AS n FROM updated_new WHERE "parentId" IS NOT NULL
      UNION ALL
      SELECT "parentId", -1 AS n FROM updated_old WHERE "parentId" IS NOT NULL
    ) moves GROUP BY "parentId"
  ) c
  WHERE o."parentId" = c."parentId" AND c.n <> 0;
  RETURN NULL;
END $$;

CREATE TRIGGER "account_child_count_insert" AFTER INSERT ON "Account"
  REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION "account_child_count_insert"();
CREATE TRIGGER "account_child_count_delete" AFTER DELETE ON "Account"
  REFERENCING OLD TABLE AS deleted FOR EACH STATEMENT EXECUTE FUNCTION "account_child_count_delete"();
CREATE TRIGGER "account_child_count_update" AFTER UPDATE ON "Account"
  REFERENCING OLD TABLE AS updated_old NEW TABLE AS updated_new FOR EACH STATEMENT EXECUTE FUNCTION "account_child_count_update"();
