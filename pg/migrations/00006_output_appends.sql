-- +goose Up
-- Streaming output is appended in SQL (text = text || $n) instead of
-- rewriting the whole message per chunk, so the text moves out of
-- content_json into its own column, with its UTF-16 length beside it (the
-- offset clients use for message_delta). turns.applied_seq is the highest
-- runtime output sequence applied to the Turn: a retried batch (an
-- ambiguous commit) is applied once. Same model as
-- sqlite/migrations/00006_output_appends.sql.
ALTER TABLE messages ADD COLUMN text text NOT NULL DEFAULT '';
ALTER TABLE messages ADD COLUMN text_len bigint NOT NULL DEFAULT 0;
UPDATE messages SET text = coalesce(content_json::jsonb ->> 'text', ''),
    content_json = (content_json::jsonb - 'text')::text;
-- UTF-16 length: code points plus one per supplementary-plane character.
UPDATE messages SET text_len = char_length(text)
    + (SELECT count(*) FROM regexp_matches(text, '[\U00010000-\U0010FFFF]', 'g'));
ALTER TABLE turns ADD COLUMN applied_seq bigint NOT NULL DEFAULT 0;

-- +goose Down
UPDATE messages SET content_json = jsonb_set(content_json::jsonb, '{text}', to_jsonb(text))::text;
ALTER TABLE messages DROP COLUMN text_len;
ALTER TABLE messages DROP COLUMN text;
ALTER TABLE turns DROP COLUMN applied_seq;
