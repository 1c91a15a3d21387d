-- +goose Up
-- No-op on PostgreSQL, kept so both dialects share migration numbers and
-- names. On SQLite this drops two indexes an output commit rewrote a page
-- of on every chunk (outbox_pending, and messages_turn_version for one on
-- the turn alone). On PostgreSQL an append is not a HOT update (version is
-- indexed by messages_version), so it inserts into every index of the row
-- whichever columns they hold, and the relays of several replicas claim
-- rows by age through outbox_pending.
SELECT 1;

-- +goose Down
SELECT 1;
