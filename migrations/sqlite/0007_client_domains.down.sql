-- A client without a domain gets its id as one; two clients of one email
-- make the unique constraint fail: remove one of them first. Foreign keys
-- must be off, as for the up migration.
CREATE TEMP TABLE migration_0007_foreign_keys_off (on_ INTEGER CHECK (on_ = 0));
INSERT INTO migration_0007_foreign_keys_off SELECT foreign_keys FROM pragma_foreign_keys;
DROP TABLE migration_0007_foreign_keys_off;

CREATE TABLE clients_0007 (
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
INSERT INTO clients_0007 (id, name, email, domain, default_algorithm, api_key_hash, created_at)
    SELECT id, name, email, coalesce(domain, id), default_algorithm, api_key_hash, created_at FROM clients;
DROP TABLE clients;
ALTER TABLE clients_0007 RENAME TO clients;
