-- The admin audit log: entries ordered by (at_ms, seq), kept admin.audit_retention_days.
CREATE TABLE toolmark_audit (
    seq   BIGSERIAL PRIMARY KEY,
    at_ms BIGINT NOT NULL,
    entry TEXT NOT NULL
);

CREATE INDEX toolmark_audit_order ON toolmark_audit (at_ms, seq);
