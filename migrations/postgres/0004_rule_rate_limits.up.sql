-- Issue 17: a rule's always_count (its limit counts hits even past the
-- limit: costs reported after the response), and rate_limits, the rule's
-- limits when given as a list (several limits on one descriptor), as JSON;
-- '[]' when the rule has the one limit of its columns.
ALTER TABLE rules
    ADD COLUMN always_count BOOLEAN NOT NULL DEFAULT FALSE,
    ADD COLUMN rate_limits TEXT NOT NULL DEFAULT '[]';
