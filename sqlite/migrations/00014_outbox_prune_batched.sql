-- +goose Up
-- The prune trigger of 00004 ran for every row the relay marked published:
-- the relay marks every row the post-commit fast path delivered, hundreds a
-- second, and the per-row trigger was half of that marking's time while it
-- held the one writer the output commits wait for. MarkPublished now prunes
-- once per call, in bounded statements (sqlite/outbox.go).
DROP TRIGGER outbox_prune;

-- +goose Down
-- +goose StatementBegin
CREATE TRIGGER outbox_prune AFTER UPDATE OF published_at ON outbox
WHEN NEW.published_at IS NOT NULL
BEGIN
    DELETE FROM outbox WHERE published_at < NEW.published_at - 3600000;
END;
-- +goose StatementEnd
