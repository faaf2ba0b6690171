ALTER TABLE rules DROP COLUMN accuracy;
