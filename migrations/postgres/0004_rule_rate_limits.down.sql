ALTER TABLE rules DROP COLUMN rate_limits, DROP COLUMN always_count;
