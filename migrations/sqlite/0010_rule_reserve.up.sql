-- Issue 43: a rule's reservation on Envoy's two calls (reserve: hits held on
-- the request path, their ttl in seconds, the descriptor entry naming the
-- request), as JSON {"hits":…,"ttl_seconds":…,"handle":…}; '' for none.
ALTER TABLE rules ADD COLUMN reserve TEXT NOT NULL DEFAULT '';
