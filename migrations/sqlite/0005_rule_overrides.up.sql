-- Issue 31: a rule's per-identifier overrides. identifier is exact, or a
-- prefix pattern when it ends in '*'; window_seconds 0 keeps the rule's
-- window (the algorithm is always the rule's). A rule's deletion takes its
-- overrides with it.
CREATE TABLE rule_overrides (
    client_id      TEXT NOT NULL,
    rule_name      TEXT NOT NULL,
    identifier     TEXT NOT NULL,
    "limit"        INTEGER NOT NULL CHECK ("limit" > 0),
    window_seconds INTEGER NOT NULL CHECK (window_seconds >= 0),
    created_at     TIMESTAMP NOT NULL,
    PRIMARY KEY (client_id, rule_name, identifier),
    FOREIGN KEY (client_id, rule_name) REFERENCES rules (client_id, name) ON DELETE CASCADE
);
