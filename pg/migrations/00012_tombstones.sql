-- +goose Up
-- Recoverable tombstones (issue 14). A delete keeps every row of the
-- session graph and marks the sessions of one deleted component with the
-- same generation, deletion time, topmost session and deleter, so a restore
-- clears exactly that component and a purge is fenced by the exact
-- deleted_at it selected. Rows deleted before this migration (deleted_at
-- set, no generation) are legacy tombstones: listed, never restorable.
ALTER TABLE sessions ADD COLUMN deletion_generation text    NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN deleted_root_id     text    NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN deleted_by          text    NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN deleted_by_name     text    NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN restorable          boolean NOT NULL DEFAULT false;

-- The Trash pages a workspace's tombstones newest first; retention scans
-- every workspace's oldest tombstones.
CREATE INDEX sessions_trash ON sessions (workspace_id, deleted_at DESC, id DESC)
    WHERE deleted_at IS NOT NULL;
CREATE INDEX sessions_trash_age ON sessions (deleted_at, workspace_id, id)
    WHERE deleted_at IS NOT NULL;

-- +goose Down
DROP INDEX sessions_trash_age;
DROP INDEX sessions_trash;
ALTER TABLE sessions DROP COLUMN restorable;
ALTER TABLE sessions DROP COLUMN deleted_by_name;
ALTER TABLE sessions DROP COLUMN deleted_by;
ALTER TABLE sessions DROP COLUMN deleted_root_id;
ALTER TABLE sessions DROP COLUMN deletion_generation;
