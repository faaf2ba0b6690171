-- A client without a domain gets its id as one; two clients of one email
-- make the unique constraint fail: remove one of them first.
UPDATE clients SET domain = id::text WHERE domain IS NULL;
ALTER TABLE clients ALTER COLUMN domain SET NOT NULL;
ALTER TABLE clients ADD CONSTRAINT clients_email_key UNIQUE (email);
