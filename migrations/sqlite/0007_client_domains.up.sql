-- Issue 38: a client has an Envoy domain only when the operator grants one
-- (NULL: none; a UNIQUE column takes any number of NULLs), and an email is
-- a contact, not an account: no longer unique, so registering cannot tell
-- which emails are registered.
--
-- SQLite changes a column's constraints by copying the table. With foreign
-- keys on, dropping the old clients would delete every rule and exemption
-- (ON DELETE CASCADE): the migrator connects with them off (store.Migrate),
-- and this refuses to run otherwise (the CHECK fails, nothing changes).
CREATE TEMP TABLE migration_0007_foreign_keys_off (on_ INTEGER CHECK (on_ = 0));
INSERT INTO migration_0007_foreign_keys_off SELECT foreign_keys FROM pragma_foreign_keys;
DROP TABLE migration_0007_foreign_keys_off;

CREATE TABLE clients_0007 (
    id                TEXT PRIMARY KEY,
    name              TEXT NOT NULL,
    email             TEXT NOT NULL,
    domain            TEXT,
    default_algorithm TEXT NOT NULL,
    api_key_hash      BLOB NOT NULL,
    created_at        TIMESTAMP NOT NULL,
    CONSTRAINT clients_domain_key UNIQUE (domain),
    CONSTRAINT clients_api_key_hash_key UNIQUE (api_key_hash),
    CONSTRAINT clients_email_lower CHECK (email = lower(email)),
    CONSTRAINT clients_api_key_hash_len CHECK (length(api_key_hash) = 32)
);
INSERT INTO clients_0007 (id, name, email, domain, default_algorithm, api_key_hash, created_at)
    SELECT id, name, email, domain, default_algorithm, api_key_hash, created_at FROM clients;
DROP TABLE clients;
ALTER TABLE clients_0007 RENAME TO clients;
