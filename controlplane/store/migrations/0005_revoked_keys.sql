-- Data planes poll the keys revoked recently (RevokedKeys), every few seconds.
CREATE INDEX api_keys_revoked_at ON api_keys (revoked_at) WHERE revoked_at IS NOT NULL;
