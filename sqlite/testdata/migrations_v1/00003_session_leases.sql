-- +goose Up
-- Which replica (Host epoch) owns a live session's runtime, with a fencing
-- generation that increases on every change of owner. Times are unix ms.
CREATE TABLE session_leases (
    workspace_id TEXT    NOT NULL,
    session_id   TEXT    NOT NULL,
    owner        TEXT    NOT NULL,
    generation   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    PRIMARY KEY (workspace_id, session_id)
);

-- +goose Down
DROP TABLE session_leases;
