-- +goose Up
-- The relay deletes the rows it delivered instead of marking them and
-- pruning them an hour later: a mark rewrote every row (and moved it
-- between two partial indexes) only to keep it for diagnosis,
-- and on PostgreSQL it was the third most expensive statement at the
-- fanout shape. A row in the outbox is now a fact not yet delivered. Ids
-- stay unique over time once rows are deleted because outbox.id is
-- AUTOINCREMENT (00001): the publisher and the relay remember rows by id.
DROP INDEX outbox_published;
DELETE FROM outbox WHERE published_at IS NOT NULL;
DROP INDEX outbox_unpublished;
ALTER TABLE outbox DROP COLUMN published_at;
CREATE INDEX outbox_pending ON outbox (created_at, id);

-- +goose Down
DROP INDEX outbox_pending;
ALTER TABLE outbox ADD COLUMN published_at INTEGER;
CREATE INDEX outbox_unpublished ON outbox (created_at, id) WHERE published_at IS NULL;
CREATE INDEX outbox_published ON outbox (published_at) WHERE published_at IS NOT NULL;
