-- Join tokens bound to a role (proto/spec/controlplane-rpc.md, Join): a token
-- made for data planes cannot join a worker, nor the other way round. NULL is
-- a token made before roles existed; either role may still use it until it
-- expires (listed as role "any").
ALTER TABLE join_tokens ADD COLUMN role text CHECK (role IN ('worker', 'dataplane'));

-- Who set a worker's admin state (proto/spec/controlplane-rpc.md, DrainSelf):
-- true when the worker drained itself with its own certificate (a node
-- shutting down), false when an operator set it. A worker may undo only a
-- drain of its own; an operator's cordon or drain stays until an operator
-- lifts it.
ALTER TABLE workers ADD COLUMN admin_self boolean NOT NULL DEFAULT false;
