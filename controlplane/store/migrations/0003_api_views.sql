-- The API's JSON shapes, built where the data is: one function per object,
-- so every route answers the same shape (proto/openapi.yaml) for it.

CREATE FUNCTION api_ts(t timestamptz) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
$$;

CREATE FUNCTION api_sandbox(s sandboxes) RETURNS jsonb LANGUAGE sql STABLE AS $$
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
        'end_at', api_ts(s.end_at),
        'end_action', s.end_action,
        'idle_timeout_s', s.idle_timeout_s,
        'created_at', api_ts(s.created_at),
        'updated_at', api_ts(s.updated_at),
        'status_message', s.status_message,
        'worker_reachable', (w.id IS NULL OR w.state <> 'unreachable'))
    FROM (SELECT 1) one LEFT JOIN workers w ON w.id = s.worker_id
$$;

CREATE FUNCTION api_operation(o operations) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'id', o.id,
        'kind', o.kind,
        'target_id', o.target_id,
        'state', o.state,
        'message', o.message,
        'error', o.error,
        'result', o.result,
        'attempts', o.attempts,
        'created_at', api_ts(o.created_at),
        'updated_at', api_ts(o.updated_at))
$$;

CREATE FUNCTION api_template(t templates) RETURNS jsonb LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'name', t.name,
        'id', t.id,
        'source', t.spec->>'source',
        'state', t.state,
        'warm', t.warm,
        'public', t.tenant_id = 'ten_system',
        'error', t.error,
        'created_at', api_ts(t.created_at))
$$;

-- Wakes the controllers (LISTEN space_work) whenever an operation is
-- recorded or changes back to pending: the API only writes rows.
CREATE FUNCTION notify_work() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('space_work', 'op:' || NEW.id);
    RETURN NULL;
END $$;
CREATE TRIGGER operations_work AFTER INSERT OR UPDATE OF state ON operations
    FOR EACH ROW WHEN (NEW.state = 'pending') EXECUTE FUNCTION notify_work();

-- Wakes API replicas long-polling an operation when it finishes.
CREATE FUNCTION notify_op_done() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('space_op_done', NEW.id);
    RETURN NULL;
END $$;
CREATE TRIGGER operations_done AFTER UPDATE OF state ON operations
    FOR EACH ROW WHEN (NEW.state IN ('succeeded', 'failed') AND OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION notify_op_done();
