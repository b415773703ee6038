-- Suspended sandboxes move between workers (docs/controlplane.md, "Moves"):
-- each move that happened, recorded in the transaction that hands the
-- sandbox to its new worker, so that an operator (a drain) and the sandbox's
-- owner (its operation) can see where it went; collected after 30 days.
CREATE TABLE sandbox_moves (
    id           bigserial PRIMARY KEY,
    sandbox_id   text NOT NULL,
    tenant_id    text NOT NULL,
    operation_id text,
    from_worker  text NOT NULL,              -- worker ids
    to_worker    text NOT NULL,
    bytes        bigint NOT NULL DEFAULT 0,  -- the artifacts' data (the manifest's `bytes`)
    at           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sandbox_moves_from ON sandbox_moves (from_worker, at);
CREATE INDEX sandbox_moves_sandbox ON sandbox_moves (sandbox_id, at);

-- When the worker's current drain began (NULL: never drained): the moves
-- since then are its drain's.
ALTER TABLE workers ADD COLUMN drain_started_at timestamptz;

-- Sessions follow their sandbox: a move sets their worker_id to the worker it
-- went to, since their output travels with its state (0004 kept them on the
-- worker that ran them, when sandboxes did not move).
