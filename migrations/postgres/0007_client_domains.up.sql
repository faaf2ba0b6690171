-- Issue 38: a client has an Envoy domain only when the operator grants one
-- (NULL: none; a UNIQUE column takes any number of NULLs), and an email is
-- a contact, not an account: no longer unique, so registering cannot tell
-- which emails are registered.
ALTER TABLE clients ALTER COLUMN domain DROP NOT NULL;
ALTER TABLE clients DROP CONSTRAINT clients_email_key;
