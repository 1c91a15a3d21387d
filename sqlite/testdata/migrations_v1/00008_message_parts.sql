-- +goose Up
-- Streaming appends are insert-only (issue 10): SQLite rewrites the whole
-- row on UPDATE, so `text = text || ?` made each chunk cost grow with the
-- message. While a message streams, each appended piece is one row here,
-- keyed by the message and its UTF-16 offset; messages keeps its first
-- piece in text and the total UTF-16 length in text_len. Closing the
-- message (done, or a PutMessage rewrite) folds the pieces into
-- messages.text and deletes them; readers fold the pieces of a message that
-- is still streaming. Invariant: a message has pieces only while streaming.
-- Same model as pg/migrations/00009_message_parts.sql.
CREATE TABLE message_parts (
    workspace_id TEXT    NOT NULL,
    session_id   TEXT    NOT NULL,
    message_id   TEXT    NOT NULL,
    off          INTEGER NOT NULL,
    text         TEXT    NOT NULL,
    PRIMARY KEY (workspace_id, session_id, message_id, off)
) WITHOUT ROWID;

-- +goose Down
UPDATE messages SET text = text || coalesce((SELECT group_concat(p.text, '' ORDER BY p.off)
    FROM message_parts p WHERE p.workspace_id = messages.workspace_id
      AND p.session_id = messages.session_id AND p.message_id = messages.id), '');
DROP TABLE message_parts;
