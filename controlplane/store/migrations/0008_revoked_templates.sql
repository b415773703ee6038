-- Uploaded templates deleted recently: data planes poll them (RevokedKeys,
-- "templates") and refuse their upload tokens, which would otherwise upload
-- until they expire. A template counts as deleted from the moment its delete
-- is asked for (state 'deleting', by the tenant or with its tenant), and
-- stays so when the row goes; a trigger records it, whoever changes the row.
-- Template ids are unique per creation, so an id once revoked never comes
-- back. Rows older than any token's lifetime (30 days) are dropped as new
-- ones come.
CREATE TABLE revoked_templates (
    id          text PRIMARY KEY,
    revoked_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX revoked_templates_at ON revoked_templates (revoked_at);

CREATE FUNCTION templates_revoke() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.id IS NOT NULL AND OLD.spec->>'source' = 'upload'
       AND (TG_OP = 'DELETE' OR NEW.state = 'deleting' OR NEW.deleted_at IS NOT NULL) THEN
        DELETE FROM revoked_templates WHERE revoked_at < now() - interval '30 days';
        INSERT INTO revoked_templates (id) VALUES (OLD.id) ON CONFLICT (id) DO NOTHING;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER templates_revoke AFTER UPDATE OF state, deleted_at OR DELETE ON templates
    FOR EACH ROW EXECUTE FUNCTION templates_revoke();
