-- +goose Up
-- No-op on PostgreSQL, kept so both dialects share migration numbers and
-- names. On SQLite this drops the per-row prune trigger of 00004, which ran
-- once for every row the relay marked; here that trigger is already FOR
-- EACH STATEMENT, and marking does not stop other sessions' commits.
SELECT 1;

-- +goose Down
SELECT 1;
