-- Global limits: a rule's scope, 'regional' (counted in this region's Redis,
-- the default) or 'global' (one budget for every region, counted in the
-- global Redis, GLOBAL_REDIS_URL; approximate, fixed and sliding windows
-- only). A limit of rate_limits keeps its own in that column's JSON
-- ("scope", left out when regional).
ALTER TABLE rules ADD COLUMN scope TEXT NOT NULL DEFAULT 'regional' CHECK (scope IN ('regional', 'global'));
