-- +goose Up
-- Which replica (Host epoch) owns a live session's runtime, with a fencing
-- generation that increases on every change of owner. Expiry is judged on
-- the database clock.
CREATE TABLE session_leases (
    workspace_id text        NOT NULL,
    session_id   text        NOT NULL,
    owner        text        NOT NULL,
    generation   bigint      NOT NULL,
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (workspace_id, session_id)
);

-- +goose Down
DROP TABLE session_leases;
