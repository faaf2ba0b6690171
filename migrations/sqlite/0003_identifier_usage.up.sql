-- identifier_usage counts /check decisions per identifier of a client, for the
-- top identifiers of /stats. Like usage it has no foreign key (counts arrive
-- in batches). last_seen is Unix seconds, to within one flush of the usage
-- recorder; rows unseen for a day are pruned.
CREATE TABLE identifier_usage (
    client_id  TEXT NOT NULL,
    identifier TEXT NOT NULL,
    allowed    INTEGER NOT NULL DEFAULT 0,
    rejected   INTEGER NOT NULL DEFAULT 0,
    last_seen  INTEGER NOT NULL,
    PRIMARY KEY (client_id, identifier)
);
CREATE INDEX identifier_usage_last_seen ON identifier_usage (last_seen);
