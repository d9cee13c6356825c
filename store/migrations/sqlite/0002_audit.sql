-- The admin audit log: entries ordered by (at_ms, seq), kept admin.audit_retention_days.
CREATE TABLE toolmark_audit (
    seq   INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms INTEGER NOT NULL,
    entry TEXT NOT NULL
);

CREATE INDEX toolmark_audit_order ON toolmark_audit (at_ms, seq);
