-- +goose Up
-- A fence (the lease check, an output commit's check of its Turn and
-- session, an append at a known offset) used to be read back in Go before
-- COMMIT was sent, so every fenced transaction took a round trip for it
-- alone. ensemble_fence raises when its check is false, so the server
-- aborts the transaction itself and the fence can go in COMMIT's batch:
-- a streamed chunk commits in one round trip. The SQLSTATE names what
-- failed (pg/errors.go maps it): ENL01 the lease, ENN01 a row not as
-- expected.
-- +goose StatementBegin
CREATE FUNCTION ensemble_fence(ok boolean, state text) RETURNS boolean
    LANGUAGE plpgsql
AS $$
BEGIN
    IF ok IS NOT TRUE THEN
        RAISE EXCEPTION 'ensemble fence refused the transaction' USING ERRCODE = state;
    END IF;
    RETURN true;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION ensemble_fence(boolean, text);
