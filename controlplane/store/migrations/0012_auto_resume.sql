-- Waking on ingress (docs/ingress.md, "Waking a sandbox"): a sandbox with
-- auto_resume set that is paused or suspended is woken by a request for one
-- of its ports that the data plane lets through (a valid token, or public
-- mode), instead of being answered 409. The data plane asks for the wake
-- with ResolveSandbox's "wake" (proto/spec/controlplane-rpc.md).
ALTER TABLE sandboxes ADD COLUMN auto_resume boolean NOT NULL DEFAULT false;
-- The length of the sandbox's timeout as last set (at create, or with
-- POST /v1/sandboxes/{id}/timeout); NULL: none. A sandbox woken on ingress
-- after its timeout passed gets it again from then.
ALTER TABLE sandboxes ADD COLUMN timeout_s integer;

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
        'ingress', jsonb_build_object('mode', s.ingress, 'auto_resume', s.auto_resume),
        'end_at', api_ts(s.end_at),
        'end_action', s.end_action,
        'idle_timeout_s', s.idle_timeout_s,
        'created_at', api_ts(s.created_at),
        'updated_at', api_ts(s.updated_at),
        'status_message', s.status_message,
        'worker_reachable', (w.id IS NULL OR w.state <> 'unreachable'))
    FROM (SELECT 1) one LEFT JOIN workers w ON w.id = s.worker_id
$$;
