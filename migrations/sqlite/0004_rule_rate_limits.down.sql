ALTER TABLE rules DROP COLUMN rate_limits;
ALTER TABLE rules DROP COLUMN always_count;
