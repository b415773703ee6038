-- A join under the name of a worker that has joined before takes over its
-- identity (its sandboxes, their secrets when they are made again), so it
-- needs an operator's consent (proto/spec/controlplane-rpc.md, Join): POST
-- /v1/workers/{id}/allow-rejoin sets this for an hour; the rejoin it lets
-- through clears it.
ALTER TABLE workers ADD COLUMN rejoin_allowed_until timestamptz;
