-- +goose Up
-- The session message queue (issue 12): steering and follow-up entries
-- admitted while a turn runs, and one revision per session that every
-- queue mutation bumps in its own transaction.
CREATE TABLE session_queues (
    workspace_id  TEXT    NOT NULL,
    session_id    TEXT    NOT NULL,
    revision      INTEGER NOT NULL,
    fence_turn_id TEXT    NOT NULL DEFAULT '',
    PRIMARY KEY (workspace_id, session_id)
);

CREATE TABLE queue_entries (
    workspace_id      TEXT    NOT NULL,
    session_id        TEXT    NOT NULL,
    id                TEXT    NOT NULL,
    position          INTEGER NOT NULL,
    disposition       TEXT    NOT NULL,
    state             TEXT    NOT NULL,
    client_submit_id  TEXT    NOT NULL,
    author            TEXT    NOT NULL,
    author_name       TEXT    NOT NULL DEFAULT '',
    content_json      TEXT    NOT NULL,
    digest            TEXT    NOT NULL,
    target_turn_id    TEXT    NOT NULL DEFAULT '',
    turn_id           TEXT    NOT NULL DEFAULT '',
    admitted_revision INTEGER NOT NULL,
    revision          INTEGER NOT NULL,
    retracted_by      TEXT    NOT NULL DEFAULT '',
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    PRIMARY KEY (workspace_id, session_id, id),
    UNIQUE (workspace_id, client_submit_id),
    UNIQUE (workspace_id, session_id, position)
);

CREATE INDEX queue_entries_state ON queue_entries (workspace_id, session_id, state, position);
CREATE INDEX queue_entries_turn ON queue_entries (workspace_id, session_id, turn_id);

-- +goose Down
DROP TABLE queue_entries;
DROP TABLE session_queues;
