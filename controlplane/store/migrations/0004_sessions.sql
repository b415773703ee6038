-- Command sessions (DESIGN §4) and the Ed25519 keys that sign attachment tokens.

-- Sessions: recorded (state `starting`) before the worker is asked, then what
-- the worker reported: `running`, `exited` (with `exit`) or `failed` (with
-- `error`). The worker that runs it is kept: a session stays on that worker
-- even if its sandbox moves. `spec` holds argv, cwd, user, pty, stdin and
-- timeout_s, never the environment's values.
ALTER TABLE sessions ADD COLUMN worker_id text;
ALTER TABLE sessions ADD COLUMN pid integer;
ALTER TABLE sessions ADD COLUMN started_at timestamptz;
ALTER TABLE sessions ADD COLUMN error text;
ALTER TABLE sessions ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now();
CREATE INDEX sessions_list ON sessions (tenant_id, sandbox_id, created_at, id);

-- Token signing keys: exactly one `current` key signs; retired keys lose
-- their private half and are still published to verifiers for as long as a
-- token they signed may live. Created by the first replica to start (the
-- unique index makes a second insert a no-op), rotated by an admin.
CREATE TABLE token_keys (
    kid         text PRIMARY KEY,
    public_pem  text NOT NULL,
    private_pem text,
    current     boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    retired_at  timestamptz
);
CREATE UNIQUE INDEX token_keys_one_current ON token_keys (current) WHERE current;

CREATE FUNCTION api_session(s sessions) RETURNS jsonb LANGUAGE sql STABLE AS $$
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
        'exit', s.exit,
        'error', s.error,
        'created_at', api_ts(s.created_at),
        'started_at', api_ts(s.started_at),
        'ended_at', api_ts(s.ended_at),
        'updated_at', api_ts(s.updated_at))
$$;
