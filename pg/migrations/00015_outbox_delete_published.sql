-- +goose Up
-- The relay deletes the rows it delivered instead of marking them and
-- pruning them an hour later: a mark was a second write of every row, not
-- HOT (it moved the row between two partial indexes), only to keep it for
-- diagnosis; at the fanout shape it was the third most
-- expensive statement. A row in the outbox is now a fact not yet delivered.
DROP TRIGGER outbox_prune ON outbox;
DROP FUNCTION outbox_prune();
DROP INDEX outbox_published;
DELETE FROM outbox WHERE published_at IS NOT NULL;
DROP INDEX outbox_unpublished;
ALTER TABLE outbox DROP COLUMN published_at;
CREATE INDEX outbox_pending ON outbox (created_at, id);

-- +goose Down
DROP INDEX outbox_pending;
ALTER TABLE outbox ADD COLUMN published_at timestamptz;
CREATE INDEX outbox_unpublished ON outbox (created_at, id) WHERE published_at IS NULL;
CREATE INDEX outbox_published ON outbox (published_at) WHERE published_at IS NOT NULL;

-- +goose StatementBegin
CREATE FUNCTION outbox_prune() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path FROM CURRENT
AS $$
BEGIN
    DELETE FROM outbox WHERE published_at < now() - interval '1 hour';
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER outbox_prune AFTER UPDATE OF published_at ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_prune();
