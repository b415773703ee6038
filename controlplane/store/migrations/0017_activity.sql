-- Idleness that tells the truth (docs/controlplane.md "Idle sandboxes"):
-- a sandbox is idle only when no session runs in it, no client reads one, no
-- connection to its ports is open and its CPU use stays low. Its worker says
-- with each heartbeat which of its running sandboxes are busy and why
-- (proto/spec/controlplane-rpc.md, Heartbeat's "busy"); the control plane
-- moves last_active_at to the heartbeat's time for each of them, and keeps
-- the reasons here (NULL: idle at the last heartbeat). API calls move
-- last_active_at as before.
ALTER TABLE sandboxes ADD COLUMN busy jsonb;

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
        'activity', jsonb_build_object('last_active_at', api_ts(s.last_active_at),
                                       'busy', coalesce(s.busy, '[]'::jsonb)),
        'created_at', api_ts(s.created_at),
        'updated_at', api_ts(s.updated_at),
        'status_message', s.status_message,
        'worker_reachable', (w.id IS NULL OR w.state <> 'unreachable'))
    FROM (SELECT 1) one LEFT JOIN workers w ON w.id = s.worker_id
$$;
