-- +goose Up
-- A streamed chunk updated the message row's version, and SQLite rewrites a
-- page of every index whose columns an UPDATE names: messages_version took
-- one page of every output commit (docs/performance.md, "WAL pages per
-- chunk on SQLite"). While a message streams its current version now goes
-- to stream_version, which no index holds, and version keeps the one it
-- was created (or last rewritten) at; closing the message moves the final
-- version back to version and clears stream_version. A message's version
-- is coalesce(stream_version, version), and readers find the streaming ones
-- through messages_streaming (a streamed append names neither streaming
-- nor version, sqlite/messages.go). Same model as PostgreSQL's 00017.
-- Invariant: stream_version IS NULL unless streaming.
ALTER TABLE messages ADD COLUMN stream_version INTEGER;
CREATE INDEX messages_streaming ON messages (workspace_id, session_id) WHERE streaming;

-- +goose Down
UPDATE messages SET version = stream_version WHERE stream_version IS NOT NULL;
DROP INDEX messages_streaming;
ALTER TABLE messages DROP COLUMN stream_version;
