-- Templates tenants upload (source "upload"): a template is 'uploading' until
-- the worker that took the archive has imported it. Its storage counts
-- against the tenant's template bytes: size_bytes once the archive is in,
-- and until then upload_max_bytes, the most its upload may hold.
ALTER TABLE templates ADD COLUMN size_bytes bigint;
ALTER TABLE templates ADD COLUMN upload_max_bytes bigint;

CREATE OR REPLACE FUNCTION api_template(t templates) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'name', t.name,
        'id', t.id,
        'source', t.spec->>'source',
        'state', t.state,
        'warm', t.warm,
        'public', t.tenant_id = 'ten_system',
        'error', t.error,
        'created_at', api_ts(t.created_at))
        || CASE WHEN t.spec ? 'format' THEN jsonb_build_object('format', t.spec->>'format') ELSE '{}'::jsonb END
        || CASE WHEN t.size_bytes IS NOT NULL THEN jsonb_build_object('size_bytes', t.size_bytes) ELSE '{}'::jsonb END
$$;
