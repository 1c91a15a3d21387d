-- +goose Up
-- No-op on SQLite, kept so both dialects share migration numbers and names
-- (pg is the reference). On PostgreSQL this adds ensemble_fence, which
-- lets a check refuse its transaction on the server so it needs no round
-- trip of its own; SQLite runs in this process and checks in Go.
SELECT 1;

-- +goose Down
SELECT 1;
