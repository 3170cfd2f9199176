-- The child search for terms of one or two characters, which the trigram indexes cannot serve
-- (a trigram needs three): without an index, a rare two-letter term walked every child of the
-- parent (4.4 s at a million children). Each child's lower-cased username and email, joined by
-- a character no term matches, give their characters and pairs of characters ("grams"); the
-- search for a short term looks its gram up here, then checks ILIKE on the rows found. The
-- index holds only names: a sign-in's update changes none, so it stays HOT and writes nothing
-- here; a sign-up or a rename computes the grams once.
-- Only a search the page has seen to be rare enough uses it (`db/child-list.ts`): evaluated on
-- every row of a large parent, the function would cost a minute; its COST tells the planner so,
-- which then reads the index rather than evaluating it row by row.
CREATE FUNCTION "child_search_grams"(names text) RETURNS text[] LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE COST 10000 AS $$
  -- The characters, then each with the next: built by the executor's array functions, linear in
  -- the names' length (a loop appending to an array in plpgsql was quadratic: 4.9 ms for 500
  -- characters on the embedded database). GIN keeps each distinct gram of a row once.
  SELECT chars || ARRAY(SELECT a || b FROM unnest(chars[1:cardinality(chars) - 1], chars[2:]) AS pairs(a, b))
  FROM regexp_split_to_array(names, '') AS chars
$$;
