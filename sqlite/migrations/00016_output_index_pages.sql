-- +goose Up
-- Every output commit (one per streamed chunk when the agent is slower
-- than a commit) wrote a page of each index whose columns it changes, and
-- SQLite's WAL takes each page as its own frame (two pwrite calls).
-- Two of them served reads that do not need them:
--   * outbox_pending ordered the relay's scan by (created_at, id). The
--     outbox holds only facts not yet delivered (00015), and ids come in
--     commit order from the one writer, so the relay reads in id order.
--   * messages_turn_version held version, which every append moves; the
--     turn's messages are few enough to sort, so the index keeps the turn.
DROP INDEX outbox_pending;
DROP INDEX messages_turn_version;
CREATE INDEX messages_turn ON messages (workspace_id, session_id, turn_id);

-- +goose Down
DROP INDEX messages_turn;
CREATE INDEX messages_turn_version ON messages (workspace_id, session_id, turn_id, version);
CREATE INDEX outbox_pending ON outbox (created_at, id);
