-- +goose Up
-- Goals (issue 13): one goal record per session (the desired projection and
-- the last provider observation, host.GoalState, as JSON; revision, seq and
-- status as columns for the compare-and-set and the recovery scan), durable
-- goal operations keyed by clientSubmitId, and generation fences.
CREATE TABLE goals (
    workspace_id TEXT NOT NULL,
    session_id   TEXT NOT NULL,
    revision     INTEGER NOT NULL,
    seq          INTEGER NOT NULL,
    status       TEXT NOT NULL DEFAULT '',
    state_json   TEXT NOT NULL,
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (workspace_id, session_id)
);
CREATE INDEX goals_status ON goals (status);

CREATE TABLE goal_operations (
    workspace_id     TEXT NOT NULL,
    client_submit_id TEXT NOT NULL,
    id               TEXT NOT NULL,
    session_id       TEXT NOT NULL,
    state            TEXT NOT NULL,
    op_json          TEXT NOT NULL,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    PRIMARY KEY (workspace_id, client_submit_id)
);
CREATE INDEX goal_operations_state ON goal_operations (state, created_at);

CREATE TABLE goal_fences (
    workspace_id  TEXT NOT NULL,
    session_id    TEXT NOT NULL,
    operation_id  TEXT NOT NULL,
    revision      INTEGER NOT NULL,
    by_operation  TEXT NOT NULL,
    state         TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    PRIMARY KEY (workspace_id, session_id, operation_id, revision)
);
CREATE INDEX goal_fences_state ON goal_fences (state, created_at);

-- +goose Down
DROP TABLE goal_fences;
DROP TABLE goal_operations;
DROP TABLE goals;
