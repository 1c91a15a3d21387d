-- +goose Up
-- A relay on one replica leases the outbox rows it is about to republish, so
-- relays on the other replicas skip them (host.OutboxClaimer). A row whose
-- lease ran out unpublished (the claimer died, its publish failed) is
-- claimable again.
ALTER TABLE outbox ADD COLUMN claimed_until timestamptz;

-- +goose Down
ALTER TABLE outbox DROP COLUMN claimed_until;
