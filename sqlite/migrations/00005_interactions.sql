-- +goose Up
-- Interactions (approvals, questions, plan decisions) and the durable
-- runtime operations that deliver their answers.

-- Identity is (workspace, session, turn, request): provider request ids
-- are only unique within their Turn.
CREATE TABLE interactions (
    workspace_id     TEXT    NOT NULL,
    session_id       TEXT    NOT NULL,
    turn_id          TEXT    NOT NULL,
    request_id       TEXT    NOT NULL,
    root_session_id  TEXT    NOT NULL,
    kind             TEXT    NOT NULL,
    title            TEXT    NOT NULL DEFAULT '',
    prompt           TEXT    NOT NULL DEFAULT '',
    options_json     TEXT    NOT NULL,
    tool_json        TEXT,
    state            TEXT    NOT NULL,
    response_json    TEXT,
    answered_by      TEXT    NOT NULL DEFAULT '',
    answered_by_name TEXT    NOT NULL DEFAULT '',
    answered_at      INTEGER,
    resolution       TEXT    NOT NULL DEFAULT '',
    operation_id     TEXT    NOT NULL DEFAULT '',
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    PRIMARY KEY (workspace_id, session_id, turn_id, request_id)
);

-- One operation per interaction: the id is derived from the identity
-- tuple, so the primary key is the idempotency key.
CREATE TABLE runtime_operations (
    workspace_id      TEXT    NOT NULL,
    id                TEXT    NOT NULL,
    kind              TEXT    NOT NULL,
    session_id        TEXT    NOT NULL,
    turn_id           TEXT    NOT NULL,
    request_id        TEXT    NOT NULL,
    response_json     TEXT    NOT NULL,
    responded_by      TEXT    NOT NULL DEFAULT '',
    responded_by_name TEXT    NOT NULL DEFAULT '',
    state             TEXT    NOT NULL,
    attempts          INTEGER NOT NULL DEFAULT 0,
    next_attempt_at   INTEGER NOT NULL,
    lease_replica     TEXT    NOT NULL DEFAULT '',
    lease_epoch       TEXT    NOT NULL DEFAULT '',
    lease_expires_at  INTEGER,
    result            TEXT    NOT NULL DEFAULT '',
    reason            TEXT    NOT NULL DEFAULT '',
    followup_json     TEXT,
    followup_turn_id  TEXT    NOT NULL DEFAULT '',
    last_error        TEXT    NOT NULL DEFAULT '',
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    PRIMARY KEY (workspace_id, id)
);

-- The worker scans due operations across all workspaces.
CREATE INDEX runtime_operations_prepared ON runtime_operations (next_attempt_at)
    WHERE state = 'prepared';
CREATE INDEX runtime_operations_leased ON runtime_operations (lease_expires_at)
    WHERE state = 'leased';

-- The interaction tree reads every session of one root.
CREATE INDEX sessions_root ON sessions (workspace_id, root_id);

-- +goose Down
DROP INDEX sessions_root;
DROP TABLE runtime_operations;
DROP TABLE interactions;
