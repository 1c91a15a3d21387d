package sqlstore

import (
	"encoding/json"
	"fmt"

	"github.com/ensemble-dev/ensemble/host"
)

// DecodeError is a stored row whose values do not form a valid record, as
// opposed to a failure to read it. Recovery quarantines such rows.
type DecodeError struct {
	What string
	Err  error
}

func (e *DecodeError) Error() string { return e.What + ": " + e.Err.Error() }
func (e *DecodeError) Unwrap() error { return e.Err }

// TurnRef names a decoded turn, for keys and messages.
func TurnRef(t host.Turn) host.TurnRef {
	return host.TurnRef{WorkspaceID: t.WorkspaceID, SessionID: t.SessionID, TurnID: t.ID}
}

// CheckTurn validates what the column types cannot (the labels document,
// phase, outcome) and names the turn in the error.
func CheckTurn(t *host.Turn, labels string) error {
	var err error
	if labels != "" {
		if e := json.Unmarshal([]byte(labels), &t.TurnLabels); e != nil {
			err = fmt.Errorf("column labels_json: %w", e)
		}
	}
	switch {
	case err != nil:
	case !t.Phase.Valid():
		err = fmt.Errorf("invalid phase %q", t.Phase)
	case !t.Outcome.Valid():
		err = fmt.Errorf("invalid outcome %q", t.Outcome)
	}
	if err != nil {
		return &DecodeError{What: "turn " + TurnRef(*t).Key(), Err: err}
	}
	return nil
}

// DecodeGoal decodes a goal record; a record that does not form a valid
// goal wraps host.ErrCorrupt, so the Host quarantines it instead of
// retrying or acting on it.
func DecodeGoal(ws, sid, raw string) (host.GoalState, error) {
	var g host.GoalState
	if err := json.Unmarshal([]byte(raw), &g); err != nil {
		return g, fmt.Errorf("decode goal %s/%s: %w: %v", ws, sid, host.ErrCorrupt, err)
	}
	switch {
	case g.WorkspaceID != ws || g.SessionID != sid:
		return g, fmt.Errorf("decode goal %s/%s: %w: it names %s/%s", ws, sid, host.ErrCorrupt, g.WorkspaceID, g.SessionID)
	case g.Goal != nil && !g.Goal.Status.Valid():
		return g, fmt.Errorf("decode goal %s/%s: %w: invalid status %q", ws, sid, host.ErrCorrupt, g.Goal.Status)
	}
	return g, nil
}

// DecodeGoalOp decodes a goal operation record, checking it is the one
// its key names.
func DecodeGoalOp(ws, csid, raw string) (host.GoalOperation, error) {
	var op host.GoalOperation
	if err := json.Unmarshal([]byte(raw), &op); err != nil {
		return op, fmt.Errorf("decode goal operation %s/%s: %w: %v", ws, csid, host.ErrCorrupt, err)
	}
	if op.WorkspaceID != ws || op.ClientSubmitID != csid {
		return op, fmt.Errorf("decode goal operation %s/%s: %w: it names %s/%s", ws, csid, host.ErrCorrupt, op.WorkspaceID, op.ClientSubmitID)
	}
	return op, nil
}

// GoalStatus is the goals.status column: the goal's status, or "" when
// the record holds no goal.
func GoalStatus(g host.GoalState) string {
	if g.Goal == nil {
		return ""
	}
	return string(g.Goal.Status)
}

// Doc is the row codec of a record kept as one JSON document column: decode
// checks it against the key the query asked for (ws, key).
func Doc[T any](ws, key string, decode func(ws, key, raw string) (T, error)) func(Scanner) (T, error) {
	return func(row Scanner) (T, error) {
		var raw string
		if err := row.Scan(&raw); err != nil {
			var zero T
			return zero, err
		}
		return decode(ws, key, raw)
	}
}
