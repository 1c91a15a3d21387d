-- +goose Up
-- No-op on SQLite, kept so both dialects share migration numbers and names
-- (pg is the reference). On PostgreSQL this adds outbox.claimed_until, the
-- lease relays on other replicas honour; a SQLite file is served by one
-- process, whose relay claims live in memory (sqlite/relay_claims.go).
SELECT 1;

-- +goose Down
SELECT 1;
