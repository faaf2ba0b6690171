-- Issue 38: which client each revision changed, so a cache reloads only
-- that client's rows, not every client's. A row per bump of the revision
-- (store.DB.bumpRevision), the oldest pruned; a cache further behind than
-- the rows kept reloads whole.
CREATE TABLE changes (
    revision  BIGINT PRIMARY KEY,
    client_id TEXT NOT NULL
);
