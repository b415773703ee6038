-- The artifact store (docs/backends.md "The artifact store"): a worker with
-- one says so in its heartbeats (workers.artifact_store), and for each
-- suspended sandbox whose copy there is whole, that copy's bytes
-- (sandboxes.stored_bytes, NULL: no whole copy). A sandbox whose worker is
-- unreachable wakes from its copy on a worker with the store (ctrl/move.c);
-- the API shows whether it is stored.
ALTER TABLE workers ADD COLUMN artifact_store boolean NOT NULL DEFAULT false;
ALTER TABLE sandboxes ADD COLUMN stored_bytes bigint;

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
        'worker_reachable', (w.id IS NULL OR w.state <> 'unreachable'),
        'stored', s.stored_bytes IS NOT NULL)
    FROM (SELECT 1) one LEFT JOIN workers w ON w.id = s.worker_id
$$;
