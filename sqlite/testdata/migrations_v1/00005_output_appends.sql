-- +goose Up
-- Streaming output is appended in SQL (text = text || ?) instead of
-- rewriting the whole message per chunk, so the text moves out of
-- content_json into its own column, with its UTF-16 length beside it (the
-- offset clients use for message_delta). turns.applied_seq is the highest
-- runtime output sequence applied to the Turn: a retried batch (an
-- ambiguous commit) is applied once.
ALTER TABLE messages ADD COLUMN text TEXT NOT NULL DEFAULT '';
ALTER TABLE messages ADD COLUMN text_len INTEGER NOT NULL DEFAULT 0;
UPDATE messages SET text = coalesce(json_extract(content_json, '$.text'), ''),
    content_json = json_remove(content_json, '$.text');
-- UTF-16 length: code points plus one per supplementary-plane character.
UPDATE messages SET text_len = length(text) + (
    WITH RECURSIVE i(k) AS (SELECT 1 UNION ALL SELECT k + 1 FROM i WHERE k < length(messages.text))
    SELECT count(*) FROM i WHERE unicode(substr(messages.text, k, 1)) > 65535);
ALTER TABLE turns ADD COLUMN applied_seq INTEGER NOT NULL DEFAULT 0;

-- +goose Down
UPDATE messages SET content_json = json_set(content_json, '$.text', text);
ALTER TABLE messages DROP COLUMN text_len;
ALTER TABLE messages DROP COLUMN text;
ALTER TABLE turns DROP COLUMN applied_seq;
