package sqlstore

import (
	"encoding/json"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// TimeColumn is a store's codec for a time column: a fresh scan
// destination and how to read the scanned value back as a time.
// PostgreSQL keeps timestamptz, SQLite unix milliseconds.
type TimeColumn func() (dest any, read func() time.Time)

// Facts collects outbox rows of (id, fact_json, created_at), at most
// limit. A row whose fact does not decode is passed to skip and left out,
// so it can never stall the relay behind it.
func Facts(limit int, at TimeColumn, skip func(id int64, err error)) func(Rows) ([]host.OutboxRow, error) {
	return func(rows Rows) ([]host.OutboxRow, error) {
		out := []host.OutboxRow{}
		for len(out) < limit && rows.Next() {
			var (
				row     host.OutboxRow
				payload string
			)
			dest, read := at()
			if err := rows.Scan(&row.ID, &payload, dest); err != nil {
				return nil, err
			}
			if err := json.Unmarshal([]byte(payload), &row.Fact); err != nil {
				skip(row.ID, err)
				continue
			}
			row.At = read()
			out = append(out, row)
		}
		return out, rows.Err()
	}
}

// PurgeCandidate is the row codec of (workspace_id, id, deleted_at).
func PurgeCandidate(at TimeColumn) func(Scanner) (host.PurgeCandidate, error) {
	return func(row Scanner) (host.PurgeCandidate, error) {
		var c host.PurgeCandidate
		dest, read := at()
		if err := row.Scan(&c.WorkspaceID, &c.SessionID, dest); err != nil {
			return host.PurgeCandidate{}, err
		}
		c.DeletedAt = read()
		return c, nil
	}
}

// GoalFence is the row codec of (workspace_id, session_id, operation_id,
// revision, by_operation, state, created_at, updated_at).
func GoalFence(at TimeColumn) func(Scanner) (host.GoalFence, error) {
	return func(row Scanner) (host.GoalFence, error) {
		var (
			f     host.GoalFence
			state string
		)
		created, readCreated := at()
		updated, readUpdated := at()
		if err := row.Scan(&f.WorkspaceID, &f.SessionID, &f.OperationID, &f.Revision, &f.ByOperation,
			&state, created, updated); err != nil {
			return host.GoalFence{}, err
		}
		f.State, f.CreatedAt, f.UpdatedAt = host.GoalFenceState(state), readCreated(), readUpdated()
		return f, nil
	}
}
