-- Issue 38: scoped API keys. A client's own key (clients.api_key_hash) may
-- do everything; the keys here are extra keys a client mints with a scope
-- ("check": /check, /check/ip and /check/batch only), e.g. to embed in a
-- browser app, and revokes by id.
CREATE TABLE api_keys (
    id         TEXT PRIMARY KEY,
    client_id  TEXT NOT NULL REFERENCES clients (id) ON DELETE CASCADE,
    scope      TEXT NOT NULL,
    key_hash   BLOB NOT NULL,
    created_at TIMESTAMP NOT NULL,
    CONSTRAINT api_keys_key_hash_key UNIQUE (key_hash),
    CONSTRAINT api_keys_key_hash_len CHECK (length(key_hash) = 32)
);
CREATE INDEX api_keys_client_id ON api_keys (client_id);
