-- Egress profiles (docs/networking.md): a tenant's named lists of what its
-- sandboxes may reach through their node's gateway. spec is the profile in
-- its normal form (gateway/policy/profile.h), checked by the API; the
-- built-in "none" and "public" are not rows. A profile a live sandbox names
-- cannot be deleted.
CREATE TABLE egress_profiles (
    id          text PRIMARY KEY,
    tenant_id   text NOT NULL REFERENCES tenants (id),
    name        text NOT NULL,
    spec        jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, name)
);

-- A sandbox's profile: spec->>'egress' names it, spec->'egress_profile' is
-- the whole profile it runs under (a copy, so that a worker is given what
-- was asked even if the profile changes again). egress_generation counts the
-- changes; egress_applied is the generation its worker has confirmed. The
-- controller sends SetEgress to running sandboxes whose worker is behind.
ALTER TABLE sandboxes ADD COLUMN egress_generation bigint NOT NULL DEFAULT 0;
ALTER TABLE sandboxes ADD COLUMN egress_applied bigint NOT NULL DEFAULT 0;
CREATE INDEX sandboxes_egress_behind ON sandboxes (worker_id)
    WHERE egress_applied < egress_generation AND deleted_at IS NULL;

CREATE FUNCTION api_egress_profile(p egress_profiles) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT p.spec || jsonb_build_object(
        'builtin', false,
        'created_at', api_ts(p.created_at),
        'updated_at', api_ts(p.updated_at),
        'sandboxes', (SELECT count(*) FROM sandboxes s WHERE s.tenant_id = p.tenant_id
                      AND s.deleted_at IS NULL AND s.spec->>'egress' = p.name))
$$;

CREATE OR REPLACE FUNCTION api_sandbox(s sandboxes) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'id', s.id,
        'template', s.template,
        'state', s.observed_state,
        'desired_state', s.desired_state,
        'worker_id', s.worker_id,
        'backend', coalesce(s.backend, w.backend),
        'resources', s.spec->'resources',
        'metadata', s.metadata,
        'labels', coalesce(s.spec->'labels', '{}'::jsonb),
        'egress', coalesce(nullif(s.spec->>'egress', ''), s.spec->'egress_profile'->>'name', 'none'),
        'egress_applied', s.egress_applied >= s.egress_generation,
        'end_at', api_ts(s.end_at),
        'end_action', s.end_action,
        'idle_timeout_s', s.idle_timeout_s,
        'created_at', api_ts(s.created_at),
        'updated_at', api_ts(s.updated_at),
        'status_message', s.status_message,
        'worker_reachable', (w.id IS NULL OR w.state <> 'unreachable'))
    FROM (SELECT 1) one LEFT JOIN workers w ON w.id = s.worker_id
$$;
