-- Deleted tenants: an admin deletes a tenant that holds no live sandbox; its
-- keys are revoked in the same transaction and the row stays (audit records,
-- operations and finished sandboxes name it), marked deleted. Its name is
-- free again for a new tenant.
ALTER TABLE tenants ADD COLUMN deleted_at timestamptz;
ALTER TABLE tenants DROP CONSTRAINT tenants_name_key;
CREATE UNIQUE INDEX tenants_name_live ON tenants (name) WHERE deleted_at IS NULL;
