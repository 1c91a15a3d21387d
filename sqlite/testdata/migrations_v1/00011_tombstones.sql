-- +goose Up
-- Recoverable tombstones (issue 14); see pg/migrations/00012_tombstones.sql.
ALTER TABLE sessions ADD COLUMN deletion_generation TEXT    NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN deleted_root_id     TEXT    NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN deleted_by          TEXT    NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN deleted_by_name     TEXT    NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN restorable          INTEGER NOT NULL DEFAULT 0;

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
