-- A worker may run several backends (--backend jail,qemu; docs/backends.md):
-- its heartbeats name them all (workers.backends, the default first, which is
-- also workers.backend), and the scheduler places a sandbox that asks for a
-- backend on a worker that runs it. NULL: the worker's one backend.
ALTER TABLE workers ADD COLUMN backends text[];
UPDATE workers SET backends = ARRAY[backend];
