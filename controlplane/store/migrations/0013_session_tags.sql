-- Session tags (docs/api.md, "Sessions"): an optional label given at create
-- (`tag`, 1 to 256 bytes without control characters), answered with the
-- session and filtered on by GET /v1/sandboxes/{id}/sessions?tag=. Tags are
-- not unique: several sessions may carry the same one (the E2B wrapper's
-- process selector by tag picks among them, docs/e2b.md).
ALTER TABLE sessions ADD COLUMN tag text;
CREATE INDEX sessions_by_tag ON sessions (tenant_id, sandbox_id, tag, created_at, id) WHERE tag IS NOT NULL;

CREATE OR REPLACE FUNCTION api_session(s sessions) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'id', s.id,
        'sandbox_id', s.sandbox_id,
        'state', s.state,
        'pid', s.pid,
        'argv', s.spec->'argv',
        'cwd', s.spec->'cwd',
        'user', s.spec->'user',
        'pty', s.spec->'pty',
        'stdin', coalesce(s.spec->'stdin', 'false'::jsonb),
        'timeout_s', coalesce(s.spec->'timeout_s', '0'::jsonb),
        'tag', s.tag,
        'exit', s.exit,
        'error', s.error,
        'created_at', api_ts(s.created_at),
        'started_at', api_ts(s.started_at),
        'ended_at', api_ts(s.ended_at),
        'updated_at', api_ts(s.updated_at))
$$;
