-- +goose Up
-- Interactions (approvals, questions, plan decisions) and the durable
-- runtime operations that deliver their answers; the same model as
-- sqlite/migrations/00005_interactions.sql. JSON payloads are text written
-- by encoding/json (see 00001_init.sql).

-- Identity is (workspace, session, turn, request): provider request ids
-- are only unique within their Turn. Two answers race on the state column:
-- UpdateInteraction is a compare-and-set (UPDATE … WHERE state = $from),
-- decided by the row lock.
CREATE TABLE interactions (
    workspace_id     text        NOT NULL,
    session_id       text        NOT NULL,
    turn_id          text        NOT NULL,
    request_id       text        NOT NULL,
    root_session_id  text        NOT NULL,
    kind             text        NOT NULL,
    title            text        NOT NULL DEFAULT '',
    prompt           text        NOT NULL DEFAULT '',
    options_json     text        NOT NULL,
    tool_json        text,
    state            text        NOT NULL,
    response_json    text,
    answered_by      text        NOT NULL DEFAULT '',
    answered_by_name text        NOT NULL DEFAULT '',
    answered_at      timestamptz,
    resolution       text        NOT NULL DEFAULT '',
    operation_id     text        NOT NULL DEFAULT '',
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    PRIMARY KEY (workspace_id, session_id, turn_id, request_id)
);

-- One operation per interaction: the id is derived from the identity
-- tuple, so the primary key is the idempotency key.
CREATE TABLE runtime_operations (
    workspace_id      text        NOT NULL,
    id                text        NOT NULL,
    kind              text        NOT NULL,
    session_id        text        NOT NULL,
    turn_id           text        NOT NULL,
    request_id        text        NOT NULL,
    response_json     text        NOT NULL,
    responded_by      text        NOT NULL DEFAULT '',
    responded_by_name text        NOT NULL DEFAULT '',
    state             text        NOT NULL,
    attempts          integer     NOT NULL DEFAULT 0,
    next_attempt_at   timestamptz NOT NULL,
    lease_replica     text        NOT NULL DEFAULT '',
    lease_epoch       text        NOT NULL DEFAULT '',
    lease_expires_at  timestamptz,
    result            text        NOT NULL DEFAULT '',
    reason            text        NOT NULL DEFAULT '',
    followup_json     text,
    followup_turn_id  text        NOT NULL DEFAULT '',
    last_error        text        NOT NULL DEFAULT '',
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL,
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
