-- +goose Up
-- Times are INTEGER unix milliseconds UTC. Booleans are INTEGER 0/1.
-- Tombstones are columns (deleted_at) so restore is lossless.

CREATE TABLE sessions (
    workspace_id        TEXT    NOT NULL,
    id                  TEXT    NOT NULL,
    parent_id           TEXT    NOT NULL DEFAULT '',
    root_id             TEXT    NOT NULL DEFAULT '',
    title               TEXT    NOT NULL DEFAULT '',
    title_explicit      INTEGER NOT NULL DEFAULT 0,
    agent               TEXT    NOT NULL DEFAULT '',
    simulated           INTEGER NOT NULL DEFAULT 0,
    settings_json       TEXT,
    pinned              INTEGER NOT NULL DEFAULT 0,
    provider_session_id TEXT    NOT NULL DEFAULT '',
    message_version     INTEGER NOT NULL DEFAULT 0,
    turn_count          INTEGER NOT NULL DEFAULT 0,
    active_turn_id      TEXT    NOT NULL DEFAULT '',
    provisional         INTEGER NOT NULL DEFAULT 0,
    created_by          TEXT    NOT NULL DEFAULT '',
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL,
    deleted_at          INTEGER,
    PRIMARY KEY (workspace_id, id)
);

-- Session listing only ever shows visible sessions, newest first.
CREATE INDEX sessions_visible ON sessions (workspace_id, created_at DESC, id DESC)
    WHERE provisional = 0 AND deleted_at IS NULL;

CREATE TABLE turns (
    workspace_id            TEXT    NOT NULL,
    session_id              TEXT    NOT NULL,
    id                      TEXT    NOT NULL,
    seq                     INTEGER NOT NULL,
    origin                  TEXT    NOT NULL DEFAULT '',
    phase                   TEXT    NOT NULL,
    outcome                 TEXT    NOT NULL DEFAULT '',
    failure_reason          TEXT    NOT NULL DEFAULT '',
    stop_reason             TEXT    NOT NULL DEFAULT '',
    provider_session_id     TEXT    NOT NULL DEFAULT '',
    provider_turn_id        TEXT    NOT NULL DEFAULT '',
    client_submit_id        TEXT    NOT NULL DEFAULT '',
    identity_anchor_turn_id TEXT    NOT NULL DEFAULT '',
    retracted               INTEGER NOT NULL DEFAULT 0,
    cancel_requested        INTEGER NOT NULL DEFAULT 0,
    submitted_by            TEXT    NOT NULL DEFAULT '',
    created_at              INTEGER NOT NULL,
    updated_at              INTEGER NOT NULL,
    settled_at              INTEGER,
    PRIMARY KEY (workspace_id, session_id, id),
    -- Deferred so a command may write a session and its turn in any order.
    FOREIGN KEY (workspace_id, session_id) REFERENCES sessions (workspace_id, id)
        DEFERRABLE INITIALLY DEFERRED
);

CREATE UNIQUE INDEX turns_seq ON turns (workspace_id, session_id, seq);

-- One provider turn binds to at most one canonical Turn; unbound turns
-- (empty provider_turn_id) are exempt.
CREATE UNIQUE INDEX turns_provider_identity
    ON turns (workspace_id, provider_session_id, provider_turn_id)
    WHERE provider_turn_id <> '';

-- Recovery scans unsettled turns across all workspaces at startup.
CREATE INDEX turns_unsettled ON turns (workspace_id, session_id, seq)
    WHERE phase <> 'settled';

CREATE TABLE messages (
    workspace_id TEXT    NOT NULL,
    session_id   TEXT    NOT NULL,
    id           TEXT    NOT NULL,
    turn_id      TEXT    NOT NULL DEFAULT '',
    role         TEXT    NOT NULL,
    kind         TEXT    NOT NULL,
    version      INTEGER NOT NULL,
    ordinal      INTEGER NOT NULL,
    content_json TEXT    NOT NULL,
    tool_json    TEXT,
    streaming    INTEGER NOT NULL DEFAULT 0,
    author       TEXT    NOT NULL DEFAULT '',
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (workspace_id, session_id, id),
    FOREIGN KEY (workspace_id, session_id) REFERENCES sessions (workspace_id, id)
        DEFERRABLE INITIALLY DEFERRED
);

CREATE INDEX messages_version ON messages (workspace_id, session_id, version);
CREATE INDEX messages_turn_version ON messages (workspace_id, session_id, turn_id, version);

CREATE TABLE submit_claims (
    workspace_id     TEXT    NOT NULL,
    client_submit_id TEXT    NOT NULL,
    session_id       TEXT    NOT NULL DEFAULT '',
    turn_id          TEXT    NOT NULL DEFAULT '',
    digest           TEXT    NOT NULL,
    content_json     TEXT    NOT NULL,
    state            TEXT    NOT NULL,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    PRIMARY KEY (workspace_id, client_submit_id)
);

-- Provisional-session compensation deletes a session's claims.
CREATE INDEX submit_claims_session ON submit_claims (workspace_id, session_id);

CREATE TABLE outbox (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    workspace_id TEXT    NOT NULL DEFAULT '',
    fact_json    TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    published_at INTEGER
);

CREATE INDEX outbox_unpublished ON outbox (created_at, id) WHERE published_at IS NULL;

CREATE TABLE quarantine (
    workspace_id TEXT    NOT NULL DEFAULT '',
    kind         TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    reason       TEXT    NOT NULL DEFAULT '',
    at           INTEGER NOT NULL,
    PRIMARY KEY (kind, key)
);

-- +goose Down
DROP TABLE quarantine;
DROP TABLE outbox;
DROP TABLE submit_claims;
DROP TABLE messages;
DROP TABLE turns;
DROP TABLE sessions;
