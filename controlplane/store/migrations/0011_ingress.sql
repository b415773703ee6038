-- Ingress (docs/api.md, "Ingress"): users reach a server listening in a
-- sandbox through the data plane, at {port}-{id}.<ingress domain> or at
-- <data plane>/v1/sandboxes/{id}/ports/{port}/. The mode says who may:
-- 'token', only a request carrying an ingress token the API minted for the
-- sandbox; 'public', anyone who has the URL. The data plane learns it with
-- ResolveSandbox (proto/spec/controlplane-rpc.md).
ALTER TABLE sandboxes ADD COLUMN ingress text NOT NULL DEFAULT 'token'
    CONSTRAINT sandboxes_ingress_mode CHECK (ingress IN ('token', 'public'));

-- The mode only: the URLs are the API's (they come from its --dataplane-url
-- and --ingress-domain), added to every sandbox it answers.
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
        'ingress', jsonb_build_object('mode', s.ingress),
        'end_at', api_ts(s.end_at),
        'end_action', s.end_action,
        'idle_timeout_s', s.idle_timeout_s,
        'created_at', api_ts(s.created_at),
        'updated_at', api_ts(s.updated_at),
        'status_message', s.status_message,
        'worker_reachable', (w.id IS NULL OR w.state <> 'unreachable'))
    FROM (SELECT 1) one LEFT JOIN workers w ON w.id = s.worker_id
$$;
