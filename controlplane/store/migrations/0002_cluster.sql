-- The cluster: the built-in system tenant (owner of public templates such as
-- `base`), the cluster CA shared by every control-plane replica, worker join
-- tokens, and the columns the scheduler and the controllers need.

INSERT INTO tenants (id, name) VALUES ('ten_system', 'system');

-- One row: the cluster CA. Created by the first replica to start (under the
-- migration lock's sibling, see pki/), loaded by every other.
CREATE TABLE cluster_ca (
    id          integer PRIMARY KEY CHECK (id = 1),
    cert_pem    text NOT NULL,
    key_pem     text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Bootstrap tokens a new worker presents once to join: `spj_<id>_<secret>`,
-- only a SHA-256 of the whole token is stored.
CREATE TABLE join_tokens (
    id          text PRIMARY KEY,
    secret_hash bytea NOT NULL,
    description text NOT NULL DEFAULT '',
    uses_left   integer,                     -- NULL: unlimited until expiry
    expires_at  timestamptz NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);

-- Workers: `state` is health (ready, unreachable, quarantined); admin_state is
-- what operators set (active, cordoned, draining). `observed` is the last
-- heartbeat: used resources, templates, warm pools and every sandbox the
-- worker holds with its state.
ALTER TABLE workers ADD COLUMN name text;
ALTER TABLE workers ADD CONSTRAINT workers_name_unique UNIQUE (name);
ALTER TABLE workers ADD COLUMN admin_state text NOT NULL DEFAULT 'active';
ALTER TABLE workers ADD COLUMN observed jsonb NOT NULL DEFAULT '{}';
ALTER TABLE workers ADD COLUMN heartbeat_ms integer NOT NULL DEFAULT 2000;
ALTER TABLE workers ADD COLUMN cert_serial text;
ALTER TABLE workers ADD COLUMN quarantine_reason text;
ALTER TABLE workers ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now();

-- Templates: an id used as the template's name on workers (`base` keeps its
-- name), the source it was built from, and per-template warm pool size.
ALTER TABLE templates ADD COLUMN id text;
ALTER TABLE templates ADD CONSTRAINT templates_id_unique UNIQUE (id);
ALTER TABLE templates ADD COLUMN warm integer NOT NULL DEFAULT 0;
ALTER TABLE templates ADD COLUMN error text;
ALTER TABLE templates ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now();
ALTER TABLE templates ADD COLUMN deleted_at timestamptz;
INSERT INTO templates (tenant_id, name, id, spec, state)
    VALUES ('ten_system', 'base', 'base', '{"source":"base"}', 'ready');

-- Sandboxes: placement constraints and lifecycle policy.
ALTER TABLE sandboxes ADD COLUMN backend text;            -- NULL: any
ALTER TABLE sandboxes ADD COLUMN template_id text;        -- the name on workers
ALTER TABLE sandboxes ADD COLUMN idle_timeout_s integer;  -- NULL: the cluster default; 0: never
ALTER TABLE sandboxes ADD COLUMN end_action text NOT NULL DEFAULT 'kill';
ALTER TABLE sandboxes ADD COLUMN status_message text;
ALTER TABLE sandboxes ADD COLUMN suspended_on text;       -- worker holding a suspended filesystem
CREATE INDEX sandboxes_end_at ON sandboxes (end_at) WHERE end_at IS NOT NULL AND deleted_at IS NULL;

-- Operations: retries with backoff, and the sandbox an operation acts on.
ALTER TABLE operations ADD COLUMN attempts integer NOT NULL DEFAULT 0;
ALTER TABLE operations ADD COLUMN next_attempt_at timestamptz NOT NULL DEFAULT now();
ALTER TABLE operations ADD COLUMN message text;           -- why it waits (e.g. cannot be placed)
CREATE INDEX operations_target ON operations (target_id, created_at);

-- Idempotency records name the route they answered.
ALTER TABLE idempotency_keys ADD COLUMN route text NOT NULL DEFAULT '';
