-- +goose Up
-- Session fork operations (issue 14). One row per fork request, keyed by
-- its clientSubmitId: `dispatching` reserves the target session id and its
-- title number before the agent is asked, `committed` is written in the
-- same transaction as the target session and is then its immutable
-- lineage, `failed` keeps the stable refusal reason. A dispatching row a
-- retry finds is never dispatched again (its outcome is unknown).
-- lineage_id is the family's first session; lineage_seq numbers titles
-- ("Title (2)", "Title (3)") across the whole family, so a fork of a fork
-- continues the sequence. Same model as sqlite/migrations/00013_lineage.sql.
CREATE TABLE session_forks (
    workspace_id        text    NOT NULL,
    client_submit_id    text    NOT NULL,
    source_session_id   text    NOT NULL,
    source_turn_id      text    NOT NULL,
    target_session_id   text    NOT NULL,
    lineage_id          text    NOT NULL,
    lineage_seq         BIGINT NOT NULL,
    base_title          text    NOT NULL DEFAULT '',
    state               text    NOT NULL,
    reason              text    NOT NULL DEFAULT '',
    provider_session_id text    NOT NULL DEFAULT '',
    created_by          text    NOT NULL DEFAULT '',
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    PRIMARY KEY (workspace_id, client_submit_id)
);

CREATE UNIQUE INDEX session_forks_target ON session_forks (workspace_id, target_session_id);
CREATE UNIQUE INDEX session_forks_lineage ON session_forks (workspace_id, lineage_id, lineage_seq);

-- +goose Down
DROP TABLE session_forks;
