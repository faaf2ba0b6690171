DROP TABLE rule_overrides;
