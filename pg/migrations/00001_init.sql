-- +goose Up
-- The same canonical model as sqlite/migrations/00001_init.sql, in
-- PostgreSQL types: times are timestamptz (the Host writes millisecond
-- precision), flags are boolean. JSON payloads are text written by
-- encoding/json: stored verbatim (jsonb would reorder keys, reject the
-- \u0000 escape that valid Go strings produce, and re-parse every streamed
-- message update); cast to json to query them.
-- Tombstones are columns (deleted_at) so restore is lossless.

CREATE TABLE sessions (
    workspace_id        text        NOT NULL,
    id                  text        NOT NULL,
    parent_id           text        NOT NULL DEFAULT '',
    root_id             text        NOT NULL DEFAULT '',
    title               text        NOT NULL DEFAULT '',
    title_explicit      boolean     NOT NULL DEFAULT false,
    agent               text        NOT NULL DEFAULT '',
    simulated           boolean     NOT NULL DEFAULT false,
    settings_json       text,
    pinned              boolean     NOT NULL DEFAULT false,
    provider_session_id text        NOT NULL DEFAULT '',
    message_version     bigint      NOT NULL DEFAULT 0,
    turn_count          bigint      NOT NULL DEFAULT 0,
    active_turn_id      text        NOT NULL DEFAULT '',
    provisional         boolean     NOT NULL DEFAULT false,
    created_by          text        NOT NULL DEFAULT '',
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    deleted_at          timestamptz,
    PRIMARY KEY (workspace_id, id)
);

-- Session listing only ever shows visible sessions, newest first.
CREATE INDEX sessions_visible ON sessions (workspace_id, created_at DESC, id DESC)
    WHERE NOT provisional AND deleted_at IS NULL;

CREATE TABLE turns (
    workspace_id            text        NOT NULL,
    session_id              text        NOT NULL,
    id                      text        NOT NULL,
    seq                     bigint      NOT NULL,
    origin                  text        NOT NULL DEFAULT '',
    phase                   text        NOT NULL,
    outcome                 text        NOT NULL DEFAULT '',
    failure_reason          text        NOT NULL DEFAULT '',
    stop_reason             text        NOT NULL DEFAULT '',
    provider_session_id     text        NOT NULL DEFAULT '',
    provider_turn_id        text        NOT NULL DEFAULT '',
    client_submit_id        text        NOT NULL DEFAULT '',
    identity_anchor_turn_id text        NOT NULL DEFAULT '',
    retracted               boolean     NOT NULL DEFAULT false,
    cancel_requested        boolean     NOT NULL DEFAULT false,
    submitted_by            text        NOT NULL DEFAULT '',
    created_at              timestamptz NOT NULL,
    updated_at              timestamptz NOT NULL,
    settled_at              timestamptz,
    PRIMARY KEY (workspace_id, session_id, id),
    -- Deferred so a command may write a session and its turn in any order.
    FOREIGN KEY (workspace_id, session_id) REFERENCES sessions (workspace_id, id)
        DEFERRABLE INITIALLY DEFERRED
);

-- Two replicas admitting a turn for one session cannot both take a seq.
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
    workspace_id text        NOT NULL,
    session_id   text        NOT NULL,
    id           text        NOT NULL,
    turn_id      text        NOT NULL DEFAULT '',
    role         text        NOT NULL,
    kind         text        NOT NULL,
    version      bigint      NOT NULL,
    ordinal      bigint      NOT NULL,
    content_json text        NOT NULL,
    tool_json    text,
    streaming    boolean     NOT NULL DEFAULT false,
    author       text        NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    PRIMARY KEY (workspace_id, session_id, id),
    FOREIGN KEY (workspace_id, session_id) REFERENCES sessions (workspace_id, id)
        DEFERRABLE INITIALLY DEFERRED
);

CREATE INDEX messages_version ON messages (workspace_id, session_id, version);
CREATE INDEX messages_turn_version ON messages (workspace_id, session_id, turn_id, version);

-- The primary key is what makes a ClientSubmitID idempotent across
-- replicas: a concurrent second claim fails with a unique violation.
CREATE TABLE submit_claims (
    workspace_id     text        NOT NULL,
    client_submit_id text        NOT NULL,
    session_id       text        NOT NULL DEFAULT '',
    turn_id          text        NOT NULL DEFAULT '',
    digest           text        NOT NULL,
    content_json     text        NOT NULL,
    state            text        NOT NULL,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    PRIMARY KEY (workspace_id, client_submit_id)
);

-- Provisional-session compensation deletes a session's claims.
CREATE INDEX submit_claims_session ON submit_claims (workspace_id, session_id);

CREATE TABLE outbox (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id text        NOT NULL DEFAULT '',
    fact_json    text        NOT NULL,
    created_at   timestamptz NOT NULL,
    published_at timestamptz
);

CREATE INDEX outbox_unpublished ON outbox (created_at, id) WHERE published_at IS NULL;

CREATE TABLE quarantine (
    workspace_id text        NOT NULL DEFAULT '',
    kind         text        NOT NULL,
    key          text        NOT NULL,
    reason       text        NOT NULL DEFAULT '',
    at           timestamptz NOT NULL,
    PRIMARY KEY (kind, key)
);

-- +goose Down
DROP TABLE quarantine;
DROP TABLE outbox;
DROP TABLE submit_claims;
DROP TABLE messages;
DROP TABLE turns;
DROP TABLE sessions;
