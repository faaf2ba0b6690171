DROP TABLE identifier_usage;
