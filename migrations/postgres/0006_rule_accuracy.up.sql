-- Issue 29: a rule's accuracy: 'exact' (every decision on the shared count)
-- or 'approximate' (decided from memory, synced to Redis in the background;
-- fixed and sliding windows only). A limit of rate_limits keeps its own in
-- that column's JSON ("accuracy", left out when exact).
ALTER TABLE rules ADD COLUMN accuracy TEXT NOT NULL DEFAULT 'exact' CHECK (accuracy IN ('exact', 'approximate'));
