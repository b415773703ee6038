-- Tenant quotas (docs/controlplane.md, "Quotas and rate limits").
--
-- An admin's limits for one tenant, each overriding the cluster's default
-- (the control plane's --quota-* options) while it is set:
--   {"running_sandboxes": 10, "cpu_millis": 8000, ...}
-- A value is a limit >= 0, or -1 for none; a key that is absent takes the
-- cluster's default. The keys are those of quota_charge() below, and
-- sessions_per_sandbox, templates and template_bytes.
ALTER TABLE tenants ADD COLUMN quotas jsonb NOT NULL DEFAULT '{}';

-- A tenant's live sandboxes, found without reading the deleted ones it had
-- (they stay a day): every create and wake counts them.
CREATE INDEX sandboxes_tenant_live ON sandboxes (tenant_id) WHERE deleted_at IS NULL;

-- What one sandbox counts against its tenant's quotas in a desired state:
--   running or paused: running_sandboxes 1 and its cpu_millis, memory_mb and
--     disk_mb (a paused sandbox keeps its memory and its place on its worker);
--   suspended: suspended_mb, its disk_mb and memory_mb — the most its
--     artifacts can hold (its root filesystem, its saved memory): the store
--     does not record the artifacts' actual bytes;
--   stopped: suspended_mb, its disk_mb (its root filesystem stays on its
--     worker);
--   anything else (deleted): nothing.
CREATE FUNCTION quota_charge(spec jsonb, desired text) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN desired IN ('running', 'paused') THEN jsonb_build_object(
            'running_sandboxes', 1,
            'cpu_millis', coalesce((spec->'resources'->>'cpu_millis')::bigint, 0),
            'memory_mb', coalesce((spec->'resources'->>'memory_mb')::bigint, 0),
            'disk_mb', coalesce((spec->'resources'->>'disk_mb')::bigint, 0))
        WHEN desired = 'suspended' THEN jsonb_build_object(
            'suspended_mb', coalesce((spec->'resources'->>'disk_mb')::bigint, 0)
                          + coalesce((spec->'resources'->>'memory_mb')::bigint, 0))
        WHEN desired = 'stopped' THEN jsonb_build_object(
            'suspended_mb', coalesce((spec->'resources'->>'disk_mb')::bigint, 0))
        ELSE '{}'::jsonb
    END
$$;

-- What moving a sandbox from one desired state to another adds to each
-- quota's use (negative: frees).
CREATE FUNCTION quota_delta(spec jsonb, from_state text, to_state text) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(jsonb_object_agg(k, coalesce((t->>k)::bigint, 0) - coalesce((f->>k)::bigint, 0)), '{}'::jsonb)
    FROM quota_charge(spec, to_state) t, quota_charge(spec, from_state) f,
         LATERAL (SELECT jsonb_object_keys(t) UNION SELECT jsonb_object_keys(f)) ks(k)
$$;

-- A tenant's use of its quotas, sessions_per_sandbox aside (the API counts
-- those per sandbox): its live sandboxes (a failed one holds nothing) by
-- quota_charge(), its templates, and its templates' bytes (as the template
-- routes count them: a template's size once known, its reservation before).
CREATE FUNCTION tenant_usage(tenant text) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'running_sandboxes', coalesce(sum((c->>'running_sandboxes')::bigint), 0),
        'cpu_millis', coalesce(sum((c->>'cpu_millis')::bigint), 0),
        'memory_mb', coalesce(sum((c->>'memory_mb')::bigint), 0),
        'disk_mb', coalesce(sum((c->>'disk_mb')::bigint), 0),
        'suspended_mb', coalesce(sum((c->>'suspended_mb')::bigint), 0),
        'templates', (SELECT count(*) FROM templates t WHERE t.tenant_id = tenant AND t.deleted_at IS NULL),
        'template_bytes', (SELECT coalesce(sum(coalesce(t.size_bytes, t.upload_max_bytes, 0)), 0)::bigint
                           FROM templates t WHERE t.tenant_id = tenant AND t.deleted_at IS NULL))
    FROM (SELECT quota_charge(s.spec, s.desired_state) AS c FROM sandboxes s
          WHERE s.tenant_id = tenant AND s.deleted_at IS NULL AND s.observed_state <> 'failed') x
$$;

-- The limits in force for a tenant: the cluster's defaults (a JSON object
-- the API passes, from its options) with the tenant's own over them.
CREATE FUNCTION tenant_limits(tenant text, defaults jsonb) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT defaults || coalesce((SELECT t.quotas FROM tenants t WHERE t.id = tenant), '{}'::jsonb)
$$;

-- The first quota a change of use (delta: quota -> amount added) would take
-- past its limit, as {"quota", "limit", "used", "asked"}; NULL when every
-- one has room. A quota already past its limit (lowered below what is in
-- use) refuses any addition and keeps what is there. Run it under the
-- tenant's row lock (SELECT ... FOR NO KEY UPDATE), in the transaction that
-- records the change, so that two requests cannot both take the last room.
CREATE FUNCTION quota_refusal(tenant text, defaults jsonb, delta jsonb) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object('quota', d.key, 'limit', (l->>d.key)::bigint, 'used', coalesce((u->>d.key)::bigint, 0),
                              'asked', d.value::bigint)
    FROM tenant_limits(tenant, defaults) l, tenant_usage(tenant) u, jsonb_each_text(delta) d
    WHERE d.value::bigint > 0 AND l ? d.key AND (l->>d.key)::bigint >= 0
      AND coalesce((u->>d.key)::bigint, 0) + d.value::bigint > (l->>d.key)::bigint
    ORDER BY d.key LIMIT 1
$$;
