-- The tenant catalog: one row per tenant, its body as toolmark-config seals it, its version
-- (the catalog's revision at its last change); the revision moves with every change.
CREATE TABLE toolmark_records (
    id      TEXT PRIMARY KEY,
    version BIGINT NOT NULL,
    body    TEXT NOT NULL
);

CREATE TABLE toolmark_revision (
    one      SMALLINT PRIMARY KEY CHECK (one = 1),
    revision BIGINT NOT NULL
);

INSERT INTO toolmark_revision (one, revision) VALUES (1, 0);
