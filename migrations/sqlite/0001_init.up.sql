CREATE TABLE clients (
    id                TEXT PRIMARY KEY,
    name              TEXT NOT NULL,
    email             TEXT NOT NULL,
    domain            TEXT NOT NULL,
    default_algorithm TEXT NOT NULL,
    api_key_hash      BLOB NOT NULL,
    created_at        TIMESTAMP NOT NULL,
    CONSTRAINT clients_email_key UNIQUE (email),
    CONSTRAINT clients_domain_key UNIQUE (domain),
    CONSTRAINT clients_api_key_hash_key UNIQUE (api_key_hash),
    CONSTRAINT clients_email_lower CHECK (email = lower(email)),
    CONSTRAINT clients_api_key_hash_len CHECK (length(api_key_hash) = 32)
);

CREATE TABLE rules (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    client_id      TEXT NOT NULL REFERENCES clients (id) ON DELETE CASCADE,
    name           TEXT NOT NULL,
    algorithm      TEXT NOT NULL,
    "limit"        INTEGER NOT NULL CHECK ("limit" > 0),
    window_seconds INTEGER NOT NULL CHECK (window_seconds >= 0),
    refill_rate    REAL NOT NULL DEFAULT 0 CHECK (refill_rate >= 0),
    descriptors    TEXT NOT NULL DEFAULT '[]',
    created_at     TIMESTAMP NOT NULL,
    CONSTRAINT rules_client_id_name_key UNIQUE (client_id, name)
);

CREATE TABLE exemptions (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    client_id  TEXT NOT NULL REFERENCES clients (id) ON DELETE CASCADE,
    identifier TEXT NOT NULL,
    reason     TEXT NOT NULL DEFAULT '',
    created_at TIMESTAMP NOT NULL,
    CONSTRAINT exemptions_client_id_identifier_key UNIQUE (client_id, identifier)
);

-- usage has no foreign key on purpose: counts arrive in batches from the
-- usage recorder, and one unknown client id must not make a whole batch fail.
CREATE TABLE usage (
    client_id TEXT NOT NULL,
    algorithm TEXT NOT NULL,
    allowed   INTEGER NOT NULL DEFAULT 0,
    rejected  INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (client_id, algorithm)
);

-- revision is one row, bumped in the same transaction as every write to
-- clients, rules and exemptions; caches poll it to know when to reload.
CREATE TABLE revision (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    value INTEGER NOT NULL
);
INSERT INTO revision (id, value) VALUES (1, 0);
