package sqlite

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/internal/sqlstore"
)

// Goals (issue 13): the goal record is one JSON document per session; the
// revision, seq and status columns serve the compare-and-set and the
// recovery scans.

func getGoal(ctx context.Context, q querier, ws, sid string) (host.GoalState, error) {
	return sqlstore.One(dialect, q.QueryRowContext(ctx, `SELECT state_json FROM goals WHERE workspace_id = ? AND session_id = ?`, ws, sid),
		sqlstore.Doc(ws, sid, sqlstore.DecodeGoal), "goal of session "+sid, "get goal")
}

// GetGoal returns the session's goal record.
func (s *Store) GetGoal(ctx context.Context, ws, sessionID string) (host.GoalState, error) {
	r, err := s.reader()
	if err != nil {
		return host.GoalState{}, err
	}
	return getGoal(ctx, r, ws, sessionID)
}

func (t *tx) Goal(ctx context.Context, ws, sessionID string) (host.GoalState, error) {
	return getGoal(ctx, t.tx, ws, sessionID)
}

// PutGoal inserts or replaces the goal record; it never moves the revision
// or seq backwards (host.ErrConflict).
func (t *tx) PutGoal(ctx context.Context, g host.GoalState) error {
	raw, err := json.Marshal(g)
	if err != nil {
		return fmt.Errorf("sqlite: put goal: %w", err)
	}
	res, err := t.tx.ExecContext(ctx, `INSERT INTO goals (workspace_id, session_id, revision, seq, status, state_json, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (workspace_id, session_id) DO UPDATE SET revision = excluded.revision,
			seq = excluded.seq, status = excluded.status, state_json = excluded.state_json,
			updated_at = excluded.updated_at
		WHERE goals.revision <= excluded.revision AND goals.seq <= excluded.seq`,
		g.WorkspaceID, g.SessionID, g.Revision, g.Seq, sqlstore.GoalStatus(g), string(raw), ms(g.UpdatedAt))
	if err != nil {
		return classify("put goal", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return classify("put goal", err)
	} else if n == 0 {
		return fmt.Errorf("sqlite: put goal %s: revision or seq would go back: %w", g.SessionID, host.ErrConflict)
	}
	return nil
}

func getGoalOp(ctx context.Context, q querier, ws, csid string) (host.GoalOperation, error) {
	return sqlstore.One(dialect, q.QueryRowContext(ctx, `SELECT op_json FROM goal_operations
		WHERE workspace_id = ? AND client_submit_id = ?`, ws, csid),
		sqlstore.Doc(ws, csid, sqlstore.DecodeGoalOp), "goal operation "+csid, "get goal operation")
}

// GetGoalOperation returns the goal operation of a clientSubmitId.
func (s *Store) GetGoalOperation(ctx context.Context, ws, clientSubmitID string) (host.GoalOperation, error) {
	r, err := s.reader()
	if err != nil {
		return host.GoalOperation{}, err
	}
	return getGoalOp(ctx, r, ws, clientSubmitID)
}

func (t *tx) GoalOperation(ctx context.Context, ws, clientSubmitID string) (host.GoalOperation, error) {
	return getGoalOp(ctx, t.tx, ws, clientSubmitID)
}

func (t *tx) InsertGoalOperation(ctx context.Context, op host.GoalOperation) error {
	raw, err := json.Marshal(op)
	if err != nil {
		return fmt.Errorf("sqlite: insert goal operation: %w", err)
	}
	_, err = t.tx.ExecContext(ctx, `INSERT INTO goal_operations (workspace_id, client_submit_id, id,
		session_id, state, op_json, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		op.WorkspaceID, op.ClientSubmitID, op.ID, op.SessionID, string(op.State), string(raw),
		ms(op.CreatedAt), ms(op.UpdatedAt))
	return classify("insert goal operation", err)
}

// UpdateGoalOperation writes the lifecycle fields; the identity (action,
// digest, spec, creation) stays as first written.
func (t *tx) UpdateGoalOperation(ctx context.Context, op host.GoalOperation) error {
	cur, err := getGoalOp(ctx, t.tx, op.WorkspaceID, op.ClientSubmitID)
	if err != nil {
		return err
	}
	cur.State, cur.Revision, cur.Error, cur.UpdatedAt = op.State, op.Revision, op.Error, op.UpdatedAt
	raw, err := json.Marshal(cur)
	if err != nil {
		return fmt.Errorf("sqlite: update goal operation: %w", err)
	}
	res, err := t.tx.ExecContext(ctx, `UPDATE goal_operations SET state = ?, op_json = ?, updated_at = ?
		WHERE workspace_id = ? AND client_submit_id = ?`,
		string(cur.State), string(raw), ms(cur.UpdatedAt), op.WorkspaceID, op.ClientSubmitID)
	return affectedOne("update goal operation "+op.ClientSubmitID, res, err)
}

func (t *tx) InsertGoalFence(ctx context.Context, f host.GoalFence) error {
	_, err := t.tx.ExecContext(ctx, `INSERT INTO goal_fences (workspace_id, session_id, operation_id,
		revision, by_operation, state, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		f.WorkspaceID, f.SessionID, f.OperationID, f.Revision, f.ByOperation, string(f.State),
		ms(f.CreatedAt), ms(f.UpdatedAt))
	return classify("insert goal fence", err)
}

func (t *tx) UpdateGoalFence(ctx context.Context, f host.GoalFence) error {
	res, err := t.tx.ExecContext(ctx, `UPDATE goal_fences SET state = ?, updated_at = ?
		WHERE workspace_id = ? AND session_id = ? AND operation_id = ? AND revision = ?`,
		string(f.State), ms(f.UpdatedAt), f.WorkspaceID, f.SessionID, f.OperationID, f.Revision)
	return affectedOne("update goal fence "+f.OperationID, res, err)
}

func (t *tx) DeleteGoalFence(ctx context.Context, ws, sessionID, operationID string, revision int64, byOperation string) error {
	res, err := t.tx.ExecContext(ctx, `DELETE FROM goal_fences WHERE workspace_id = ? AND session_id = ?
		AND operation_id = ? AND revision = ? AND by_operation = ?`, ws, sessionID, operationID, revision, byOperation)
	return affectedOne("delete goal fence "+operationID, res, err)
}

// GoalFenced reports whether the exact goal identity is fenced (pending or
// done): a fenced identity never arms or advances a turn again.
func (t *tx) GoalFenced(ctx context.Context, ws, sessionID, operationID string, revision int64) (bool, error) {
	var n int
	err := t.tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM goal_fences WHERE workspace_id = ? AND session_id = ?
		AND operation_id = ? AND revision = ?`, ws, sessionID, operationID, revision).Scan(&n)
	if err != nil {
		return false, classify("goal fenced", err)
	}
	return n > 0, nil
}

// LiveGoals lists the goal records whose goal is active, in every
// workspace, of sessions that are not deleted (a tombstoned session's goal
// keeps its bytes, restore is exact, but the loop never looks at it),
// except quarantined ones; an undecodable record comes back as
// a quarantine candidate so one poisoned record never stalls the rest.
func (s *Store) LiveGoals(ctx context.Context) ([]host.GoalState, []host.Quarantined, error) {
	r, err := s.reader()
	if err != nil {
		return nil, nil, err
	}
	d, err := queryRows(ctx, r, "live goals", `SELECT g.workspace_id, g.session_id, g.state_json FROM goals g
		JOIN sessions s ON s.workspace_id = g.workspace_id AND s.id = g.session_id
		WHERE g.status = ? AND s.deleted_at IS NULL
		AND NOT EXISTS (SELECT 1 FROM quarantine q
			WHERE q.kind = ? AND q.key = g.workspace_id || '/' || g.session_id)
		ORDER BY g.updated_at`, []any{string(host.GoalActive), host.QuarantineKindGoal},
		sqlstore.JSONRecords(host.QuarantineKindGoal, sqlstore.DecodeGoal))
	return d.Records, d.Bad, err
}

// PendingGoalFences lists fences not yet done, oldest first.
func (s *Store) PendingGoalFences(ctx context.Context) ([]host.GoalFence, error) {
	r, err := s.reader()
	if err != nil {
		return nil, err
	}
	return queryRows(ctx, r, "pending goal fences", `SELECT workspace_id, session_id, operation_id, revision,
		by_operation, state, created_at, updated_at FROM goal_fences WHERE state = ?
		ORDER BY created_at`, []any{string(host.GoalFencePending)}, sqlstore.All(sqlstore.GoalFence(unixMS)))
}

// PendingGoalOperations lists operations still accepted, oldest first,
// except quarantined ones; an undecodable one comes back as a quarantine
// candidate.
func (s *Store) PendingGoalOperations(ctx context.Context) ([]host.GoalOperation, []host.Quarantined, error) {
	r, err := s.reader()
	if err != nil {
		return nil, nil, err
	}
	d, err := queryRows(ctx, r, "pending goal operations", `SELECT o.workspace_id, o.client_submit_id, o.op_json FROM goal_operations o
		WHERE o.state = ?
		AND NOT EXISTS (SELECT 1 FROM quarantine q
			WHERE q.kind = ? AND q.key = o.workspace_id || '/' || o.client_submit_id)
		ORDER BY o.created_at`, []any{string(host.GoalOpAccepted), host.QuarantineKindGoalOperation},
		sqlstore.JSONRecords(host.QuarantineKindGoalOperation, sqlstore.DecodeGoalOp))
	return d.Records, d.Bad, err
}

// GoalFenced is tx.GoalFenced outside a transaction (goal.get's held).
func (s *Store) GoalFenced(ctx context.Context, ws, sessionID, operationID string, revision int64) (bool, error) {
	r, err := s.reader()
	if err != nil {
		return false, err
	}
	var n int
	err = r.QueryRowContext(ctx, `SELECT COUNT(*) FROM goal_fences WHERE workspace_id = ? AND session_id = ?
		AND operation_id = ? AND revision = ?`, ws, sessionID, operationID, revision).Scan(&n)
	if err != nil {
		return false, classify("goal fenced", err)
	}
	return n > 0, nil
}
