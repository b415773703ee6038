-- Secrets (docs/secrets.md): a tenant's credentials, bound to hosts and to the
-- place in a request where they go (gateway/policy/secret.h). The value is
-- write-only and never stored in the clear: envelope encryption
-- (store/envelope.h) — ciphertext is the value under a data key of its own
-- (AES-256-GCM, bound to the secret's id and tenant), wrapped_key is that
-- data key under the cluster key key_id (bound to the secret's id and key_id);
-- the cluster keys are in a file outside the database
-- (space-controlplane --secrets-key-file). A revoked secret keeps its row
-- (sandboxes and audit records name it) and loses its ciphertext; its name is
-- free again.
CREATE TABLE secrets (
    id            text PRIMARY KEY,
    tenant_id     text NOT NULL REFERENCES tenants (id),
    name          text NOT NULL,
    hosts         jsonb NOT NULL,
    inject        jsonb NOT NULL,
    env           text NOT NULL,
    rate_per_min  integer NOT NULL DEFAULT 0,
    expires_at    timestamptz,
    key_id        text,
    wrapped_key   bytea,
    ciphertext    bytea,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    deleted_at    timestamptz,
    CHECK ((deleted_at IS NULL) = (ciphertext IS NOT NULL AND wrapped_key IS NOT NULL AND key_id IS NOT NULL))
);
CREATE UNIQUE INDEX secrets_name_live ON secrets (tenant_id, name) WHERE deleted_at IS NULL;
-- What a rewrap walks: the live secrets by the cluster key that wraps them.
CREATE INDEX secrets_key ON secrets (key_id) WHERE deleted_at IS NULL;

-- The secrets a sandbox was given at its create: the environment variable
-- that holds the placeholder, and the placeholder (unique: the gateway finds
-- the binding by it). Gone with the sandbox's row.
CREATE TABLE sandbox_secrets (
    sandbox_id   text NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
    secret_id    text NOT NULL REFERENCES secrets (id),
    env          text NOT NULL,
    placeholder  text NOT NULL UNIQUE,
    PRIMARY KEY (sandbox_id, secret_id)
);
CREATE INDEX sandbox_secrets_secret ON sandbox_secrets (secret_id);

-- When the controller last sent a sandbox its bindings because its worker said
-- it had lost their values (Heartbeat's secrets_missing): it sends them again
-- only after a heartbeat newer than that still says so.
ALTER TABLE sandboxes ADD COLUMN secrets_sent_at timestamptz;

CREATE FUNCTION api_secret(s secrets) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'id', s.id,
        'name', s.name,
        'hosts', s.hosts,
        'inject', s.inject,
        'env', s.env,
        'rate_per_min', s.rate_per_min,
        'expires_at', api_ts(s.expires_at),
        'created_at', api_ts(s.created_at),
        'updated_at', api_ts(s.updated_at),
        'revoked_at', api_ts(s.deleted_at),
        'sandboxes', (SELECT count(*) FROM sandbox_secrets ss JOIN sandboxes b ON b.id = ss.sandbox_id
                      WHERE ss.secret_id = s.id AND b.deleted_at IS NULL))
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
        'secrets', (SELECT coalesce(jsonb_agg(jsonb_build_object(
                        'name', x.name, 'env', ss.env, 'placeholder', ss.placeholder,
                        'revoked', x.deleted_at IS NOT NULL) ORDER BY ss.env), '[]'::jsonb)
                    FROM sandbox_secrets ss JOIN secrets x ON x.id = ss.secret_id WHERE ss.sandbox_id = s.id),
        'end_at', api_ts(s.end_at),
        'end_action', s.end_action,
        'idle_timeout_s', s.idle_timeout_s,
        'created_at', api_ts(s.created_at),
        'updated_at', api_ts(s.updated_at),
        'status_message', s.status_message,
        'worker_reachable', (w.id IS NULL OR w.state <> 'unreachable'))
    FROM (SELECT 1) one LEFT JOIN workers w ON w.id = s.worker_id
$$;
