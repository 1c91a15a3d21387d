-- +goose Up
-- The agent could not load the session's provider session: the session is
-- marked until a member chooses to continue in a fresh agent session,
-- instead of silently starting over without its history (issue 11).
ALTER TABLE sessions ADD COLUMN context_lost INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE sessions DROP COLUMN context_lost;
