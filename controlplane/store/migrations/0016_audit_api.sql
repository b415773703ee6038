-- The audit log through the API (GET /v1/audit, docs/api.md "Audit log";
-- docs/operations.md "Reading the audit trail").
--
-- Every record says how the call went: outcome 'ok' (written in the
-- mutation's own transaction, or for a call answered 2xx/3xx), 'denied' (401:
-- no or a bad API key, a login failure; 403: the key may not do it) or
-- 'failed' (any other refusal or error), with the HTTP status when the
-- record was made from the answer (NULL for records written inside the
-- mutation) and the error's code.
ALTER TABLE audit_log ADD COLUMN outcome text NOT NULL DEFAULT 'ok';
ALTER TABLE audit_log ADD COLUMN status integer;
ALTER TABLE audit_log ADD COLUMN error text;

-- The kind of object a record is about: the first part of its action, except
-- the files.* actions, which act on a sandbox. target is the object's id (or
-- name, for templates, egress profiles and secrets).
ALTER TABLE audit_log ADD COLUMN object_type text
    GENERATED ALWAYS AS (CASE split_part(action, '.', 1) WHEN 'files' THEN 'sandbox'
                         ELSE split_part(action, '.', 1) END) STORED;

-- The transaction that wrote the record. Pages are ordered by (xid, id) and
-- show only records whose transaction has ended before every transaction
-- still running began (xid < the snapshot's xmin): a record that commits
-- late can then never land behind a cursor that a reader already holds, so
-- following the log with the cursor misses nothing. Rows from before this
-- migration share its transaction's id and keep their order by id.
ALTER TABLE audit_log ADD COLUMN xid xid8 NOT NULL DEFAULT pg_current_xact_id();

-- One index per filter, each ending in the page order.
DROP INDEX audit_log_tenant;
CREATE INDEX audit_log_order ON audit_log (xid, id);
CREATE INDEX audit_log_tenant ON audit_log (tenant_id, xid, id);
CREATE INDEX audit_log_key ON audit_log (key_id, xid, id) WHERE key_id IS NOT NULL;
CREATE INDEX audit_log_target ON audit_log (target, xid, id) WHERE target IS NOT NULL;
CREATE INDEX audit_log_action ON audit_log (action, xid, id);
-- Time ranges, and retention's delete (the oldest first).
CREATE INDEX audit_log_at ON audit_log (at);
