-- +goose Up
-- Display facts recorded when they happen (issue 15): a turn's author
-- display name, who asked to stop it and the agent that ran it (one JSON
-- object, host.TurnLabels), and a message's author display name. Rows
-- written before this migration have none and render by id.
ALTER TABLE turns ADD COLUMN labels_json TEXT NOT NULL DEFAULT '{}';
ALTER TABLE messages ADD COLUMN author_name TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE messages DROP COLUMN author_name;
ALTER TABLE turns DROP COLUMN labels_json;
