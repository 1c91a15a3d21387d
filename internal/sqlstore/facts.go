package sqlstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// TimeColumn is a store's codec for a time column: a fresh scan
// destination and how to read the scanned value back as a time.
// PostgreSQL keeps timestamptz, SQLite unix milliseconds.
type TimeColumn func() (dest any, read func() time.Time)

// FactRow is one outbox row to write: the facts one transaction appended
// for one workspace.
type FactRow struct {
	WorkspaceID string
	JSON        string
	// Facts is how many facts the row holds.
	Facts int
}

// FactRows groups facts into outbox rows, one per run of facts of one
// workspace (a transaction's facts are of one workspace): a single fact is
// its JSON object, as every row was before rows grouped facts, several are
// a JSON array of them in order. One row per transaction is one heap tuple
// and one key for the store to write instead of one per fact.
func FactRows(facts []host.Fact) ([]FactRow, error) {
	var out []FactRow
	for start := 0; start < len(facts); {
		end := start + 1
		for end < len(facts) && facts[end].WorkspaceID == facts[start].WorkspaceID {
			end++
		}
		var v any = facts[start:end]
		if end-start == 1 {
			v = facts[start]
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("encode facts: %w", err)
		}
		out = append(out, FactRow{WorkspaceID: facts[start].WorkspaceID, JSON: string(b), Facts: end - start})
		start = end
	}
	return out, nil
}

// FactIDs gives each fact the id of the row FactRows put it in.
func FactIDs(rows []FactRow, rowIDs []int64) []int64 {
	var ids []int64
	for i, r := range rows {
		for range r.Facts {
			ids = append(ids, rowIDs[i])
		}
	}
	return ids
}

// Facts collects the facts of outbox rows of (id, fact_json, created_at),
// in order, from at most limit rows: every fact of a row read is returned
// (a row is marked published whole), each with its row's id. A row whose
// facts do not decode is passed to skip and left out, so it can never
// stall the relay behind it.
func Facts(limit int, at TimeColumn, skip func(id int64, err error)) func(Rows) ([]host.OutboxRow, error) {
	return func(rows Rows) ([]host.OutboxRow, error) {
		out := []host.OutboxRow{}
		for n := 0; n < limit && rows.Next(); n++ {
			var (
				id      int64
				payload string
			)
			dest, read := at()
			if err := rows.Scan(&id, &payload, dest); err != nil {
				return nil, err
			}
			facts, err := decodeFacts(payload)
			if err != nil {
				skip(id, err)
				continue
			}
			for _, f := range facts {
				out = append(out, host.OutboxRow{ID: id, Fact: f, At: read()})
			}
		}
		return out, rows.Err()
	}
}

// decodeFacts reads a row's fact_json: one fact's object or an array of
// facts (FactRows).
func decodeFacts(payload string) ([]host.Fact, error) {
	if strings.HasPrefix(strings.TrimLeft(payload, " \t\r\n"), "[") {
		var facts []host.Fact
		if err := json.Unmarshal([]byte(payload), &facts); err != nil {
			return nil, err
		}
		if len(facts) == 0 {
			return nil, errors.New("an empty array of facts")
		}
		return facts, nil
	}
	var f host.Fact
	if err := json.Unmarshal([]byte(payload), &f); err != nil {
		return nil, err
	}
	return []host.Fact{f}, nil
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
