-- The child list's substring search moves from Account's trigram indexes to "ChildSearch", a
-- narrow copy of each child's searchable and sortable columns, kept by triggers on Account. A
-- search for a common name visits thousands of matching rows to order them by registration:
-- compact rows make those visits about a third cheaper, and a search too short for trigrams
-- (one or two characters) scans a table a fraction of Account's size. Names are stored lower-
-- cased: `lower(x) LIKE lower(p)` is what PostgreSQL evaluates for `x ILIKE p`, minus the
-- lower-casing of every row on every search.

DROP INDEX "Account_email_trgm_idx";
DROP INDEX "Account_username_trgm_idx";

CREATE TABLE "ChildSearch" (
    "id" TEXT NOT NULL,
    "parentId" TEXT NOT NULL,
    "createdAt" TIMESTAMPTZ(3) NOT NULL,
    "lastLogin" TIMESTAMPTZ(3),
    "username" TEXT NOT NULL,
    "email" TEXT NOT NULL,

    CONSTRAINT "ChildSearch_pkey" PRIMARY KEY ("id")
);

INSERT INTO "ChildSearch" ("id", "parentId", "createdAt", "lastLogin", "username", "email")
SELECT "id", "parentId", "createdAt", "lastLogin", lower("username"), lower("email")
FROM "Account" WHERE "parentId" IS NOT NULL;

CREATE INDEX "ChildSearch_parentId_createdAt_id_idx" ON "ChildSearch"("parentId", "createdAt" DESC, "id" DESC);
CREATE INDEX "ChildSearch_username_trgm_idx" ON "ChildSearch" USING GIN ("username" gin_trgm_ops);
CREATE INDEX "ChildSearch_email_trgm_idx" ON "ChildSearch" USING GIN ("email" gin_trgm_ops);

-- Deleting a child (or changing its id) reaches the copy through the key.
ALTER TABLE "ChildSearch" ADD CONSTRAINT "ChildSearch_id_fkey" FOREIGN KEY ("id") REFERENCES "Account"("id") ON DELETE CASCADE ON UPDATE CASCADE;

-- Statement-level, with transition tables: a bulk insert of children is one INSERT ... SELECT.
CREATE FUNCTION "child_search_insert"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO "ChildSearch" ("id", "parentId", "createdAt", "lastLogin", "username", "email")
  SELECT "id", "parentId", "createdAt", "lastLogin", lower("username"), lower("email")
  FROM inserted WHERE "parentId" IS NOT NULL;
  RETURN NULL;
END $$;

-- Only rows whose copied columns changed are written (a login changes lastLogin: one narrow row).
-- An account that stops being a child loses its copy; one that becomes a child gains one.
CREATE FUNCTION "child_search_update"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE "ChildSearch" s
  SET "parentId" = n."parentId", "createdAt" = n."createdAt", "lastLogin" = n."lastLogin",
      "username" = lower(n."username"), "email" = lower(n."email")
  FROM updated_new n JOIN updated_old o ON o."id" = n."id"
  WHERE s."id" = n."id" AND n."parentId" IS NOT NULL
    AND (n."parentId", n."createdAt", n."lastLogin", n."username", n."email")
        IS DISTINCT FROM (o."parentId", o."createdAt", o."lastLogin", o."username", o."email");
  DELETE FROM "ChildSearch" s USING updated_new n WHERE s."id" = n."id" AND n."parentId" IS NULL;
  INSERT INTO "ChildSearch" ("id", "parentId", "createdAt", "lastLogin", "username", "email")
  SELECT n."id", n."parentId", n."createdAt", n."lastLogin", lower(n."username"), lower(n."email")
  FROM updated_new n LEFT JOIN updated_old o ON o."id" = n."id"
  WHERE n."parentId" IS NOT NULL AND (o."id" IS NULL OR o."parentId" IS NULL)
  ON CONFLICT ("id") DO NOTHING;
  RETURN NULL;
END $$;

CREATE TRIGGER "child_search_insert" AFTER INSERT ON "Account"
  REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION "child_search_insert"();
CREATE TRIGGER "child_search_update" AFTER UPDATE ON "Account"
  REFERENCING OLD TABLE AS updated_old NEW TABLE AS updated_new FOR EACH STATEMENT EXECUTE FUNCTION "child_search_update"();
