-- +goose Up
-- Every committed command appends outbox rows and the relay marks each one
-- published (a second write per row); without pruning the table only grows
-- (millions of rows a day at a few hundred commands a second), and with it
-- the outbox's indexes and vacuum work. Published rows are kept one hour
-- for diagnosis, then deleted by a statement trigger on the relay's mark,
-- which finds them through this partial index instead of scanning.
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

-- +goose Down
DROP TRIGGER outbox_prune ON outbox;
DROP FUNCTION outbox_prune();
DROP INDEX outbox_published;
