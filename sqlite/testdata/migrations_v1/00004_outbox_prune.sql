-- +goose Up
-- Every committed command appends outbox rows and the relay marks each one
-- published; without pruning the table only grows (millions of rows a day
-- at a few hundred commands a second). Published rows are kept one hour
-- (times are unix ms) for diagnosis, then deleted when the relay marks
-- newer ones; the partial index makes each pass a short range scan.
CREATE INDEX outbox_published ON outbox (published_at) WHERE published_at IS NOT NULL;

-- +goose StatementBegin
CREATE TRIGGER outbox_prune AFTER UPDATE OF published_at ON outbox
WHEN NEW.published_at IS NOT NULL
BEGIN
    DELETE FROM outbox WHERE published_at < NEW.published_at - 3600000;
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER outbox_prune;
DROP INDEX outbox_published;
