-- A check value per cluster key id (docs/secrets.md, "Key checks"): an
-- HMAC-SHA256 of a fixed label under the key, recorded the first time a
-- control plane sees that id. A key file whose key of a known id is other
-- bytes (a lost file made again under the same id) is refused: at start the
-- control plane does not start, and a file changed at run time is not taken,
-- instead of sealing new values under a key the old ones do not open with.
CREATE TABLE secrets_key_checks (
    key_id text PRIMARY KEY,
    check_value bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
