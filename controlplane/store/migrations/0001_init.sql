-- The control plane's first schema. Every tenant-owned table carries tenant_id
-- and every query on it is scoped by tenant (a foreign id answers like a missing one).

CREATE TABLE tenants (
    id          text PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- API keys: only a SHA-256 of the secret is stored; the secret is shown once.
CREATE TABLE api_keys (
    id          text PRIMARY KEY,
    tenant_id   text NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    name        text NOT NULL,
    admin       boolean NOT NULL DEFAULT false,
    secret_hash bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id);

CREATE TABLE templates (
    tenant_id   text NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    name        text NOT NULL,
    spec        jsonb NOT NULL,
    state       text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, name)
);

CREATE TABLE workers (
    id              text PRIMARY KEY,
    address         text NOT NULL,
    backend         text NOT NULL,
    labels          jsonb NOT NULL DEFAULT '{}',
    capacity        jsonb NOT NULL DEFAULT '{}',
    state           text NOT NULL,           -- ready, cordoned, draining, unreachable, quarantined
    failures        integer NOT NULL DEFAULT 0,
    last_heartbeat  timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now()
);

-- Desired spec and observed status of every sandbox.
CREATE TABLE sandboxes (
    id              text PRIMARY KEY,
    tenant_id       text NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    template        text NOT NULL,
    spec            jsonb NOT NULL,
    desired_state   text NOT NULL,
    observed_state  text NOT NULL,
    worker_id       text REFERENCES workers(id),
    metadata        jsonb NOT NULL DEFAULT '{}',
    error           text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    last_active_at  timestamptz NOT NULL DEFAULT now(),
    end_at          timestamptz,
    deleted_at      timestamptz
);
CREATE INDEX sandboxes_tenant ON sandboxes (tenant_id, created_at, id);
CREATE INDEX sandboxes_worker ON sandboxes (worker_id) WHERE deleted_at IS NULL;

CREATE TABLE operations (
    id          text PRIMARY KEY,
    tenant_id   text NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    kind        text NOT NULL,
    target_id   text NOT NULL,
    state       text NOT NULL,               -- pending, running, succeeded, failed
    request     jsonb NOT NULL DEFAULT '{}',
    result      jsonb,
    error       jsonb,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    deadline_at timestamptz
);
CREATE INDEX operations_pending ON operations (state, created_at) WHERE state IN ('pending', 'running');

CREATE TABLE sessions (
    id          text PRIMARY KEY,
    tenant_id   text NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    sandbox_id  text NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
    spec        jsonb NOT NULL,
    state       text NOT NULL,
    exit        jsonb,
    created_at  timestamptz NOT NULL DEFAULT now(),
    ended_at    timestamptz
);
CREATE INDEX sessions_sandbox ON sessions (sandbox_id);

-- A retried mutation with the same key returns the first answer.
CREATE TABLE idempotency_keys (
    tenant_id       text NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    key             text NOT NULL,
    request_hash    bytea NOT NULL,
    response_status integer NOT NULL,
    response_body   jsonb NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, key)
);

CREATE TABLE audit_log (
    id          bigserial PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    tenant_id   text,
    key_id      text,
    action      text NOT NULL,
    target      text,
    request_id  text,
    detail      jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_log_tenant ON audit_log (tenant_id, at);
