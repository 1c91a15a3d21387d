-- +goose Up
-- A streamed chunk updated the message row's version, which messages_version
-- and messages_turn_version index, so no append could be a HOT update: every
-- chunk inserted an entry into each of the row's three indexes (8.2 WAL
-- records per chunk, docs/performance.md). While a message streams its
-- current version now goes to stream_version, which no index holds, and
-- version keeps the one it was created (or last rewritten) at; closing the
-- message moves the final version back to version and clears
-- stream_version. A message's version is coalesce(stream_version, version),
-- and readers find the streaming ones through messages_streaming (a message
-- streams from its first piece to its close, so that index does not change
-- while it does). The turn's index keeps the turn only, as on SQLite.
-- Invariant: stream_version IS NULL unless streaming.
ALTER TABLE messages ADD COLUMN stream_version bigint;
DROP INDEX messages_turn_version;
CREATE INDEX messages_turn ON messages (workspace_id, session_id, turn_id);
CREATE INDEX messages_streaming ON messages (workspace_id, session_id) WHERE streaming;

-- +goose Down
UPDATE messages SET version = stream_version WHERE stream_version IS NOT NULL;
DROP INDEX messages_streaming;
DROP INDEX messages_turn;
CREATE INDEX messages_turn_version ON messages (workspace_id, session_id, turn_id, version);
ALTER TABLE messages DROP COLUMN stream_version;
