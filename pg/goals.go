package pg

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/internal/sqlstore"
)

// Goals (issue 13): the goal record is one JSON document per session; the
// revision, seq and status columns serve the compare-and-set and the
// recovery scans. Callers hold the session row lock (Tx.Session), which
// serializes goal mutations of one session across replicas.

func getGoal(ctx context.Context, q querier, ws, sid string) (host.GoalState, error) {
	return sqlstore.One(dialect, q.QueryRow(ctx, `SELECT state_json FROM goals WHERE workspace_id = $1 AND session_id = $2`, ws, sid),
		sqlstore.Doc(ws, sid, sqlstore.DecodeGoal), "goal of session "+sid, "get goal")
}

// GetGoal returns the session's goal record.
func (s *Store) GetGoal(ctx context.Context, ws, sessionID string) (host.GoalState, error) {
	return withPool(ctx, s, func(q querier) (host.GoalState, error) { return getGoal(ctx, q, ws, sessionID) })
}

func (t *tx) Goal(ctx context.Context, ws, sessionID string) (host.GoalState, error) {
	return txRead(t, func() (host.GoalState, error) { return getGoal(ctx, t.tx, ws, sessionID) })
}

// PutGoal inserts or replaces the goal record; it never moves the revision
// or seq backwards (host.ErrConflict).
func (t *tx) PutGoal(ctx context.Context, g host.GoalState) error {
	if t.failed != nil {
		return t.failed
	}
	raw, err := json.Marshal(g)
	if err != nil {
		return fmt.Errorf("pg: put goal: %w", err)
	}
	tag, err := t.tx.Exec(ctx, `INSERT INTO goals (workspace_id, session_id, revision, seq, status, state_json, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (workspace_id, session_id) DO UPDATE SET revision = excluded.revision,
			seq = excluded.seq, status = excluded.status, state_json = excluded.state_json,
			updated_at = excluded.updated_at
		WHERE goals.revision <= excluded.revision AND goals.seq <= excluded.seq`,
		g.WorkspaceID, g.SessionID, g.Revision, g.Seq, sqlstore.GoalStatus(g), string(raw), g.UpdatedAt)
	if err != nil {
		return t.fail(classify("put goal", err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("pg: put goal %s: revision or seq would go back: %w", g.SessionID, host.ErrConflict)
	}
	return nil
}

func getGoalOp(ctx context.Context, q querier, ws, csid string) (host.GoalOperation, error) {
	return sqlstore.One(dialect, q.QueryRow(ctx, `SELECT op_json FROM goal_operations
		WHERE workspace_id = $1 AND client_submit_id = $2`, ws, csid),
		sqlstore.Doc(ws, csid, sqlstore.DecodeGoalOp), "goal operation "+csid, "get goal operation")
}

// GetGoalOperation returns the goal operation of a clientSubmitId.
func (s *Store) GetGoalOperation(ctx context.Context, ws, clientSubmitID string) (host.GoalOperation, error) {
	return withPool(ctx, s, func(q querier) (host.GoalOperation, error) { return getGoalOp(ctx, q, ws, clientSubmitID) })
}

func (t *tx) GoalOperation(ctx context.Context, ws, clientSubmitID string) (host.GoalOperation, error) {
	return txRead(t, func() (host.GoalOperation, error) { return getGoalOp(ctx, t.tx, ws, clientSubmitID) })
}

// InsertGoalOperation records a goal operation; the primary key decides a
// race between replicas (the second is host.ErrDuplicate).
func (t *tx) InsertGoalOperation(ctx context.Context, op host.GoalOperation) error {
	if t.failed != nil {
		return t.failed
	}
	raw, err := json.Marshal(op)
	if err != nil {
		return fmt.Errorf("pg: insert goal operation: %w", err)
	}
	tag, err := t.tx.Exec(ctx, `INSERT INTO goal_operations (workspace_id, client_submit_id, id,
		session_id, state, op_json, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT DO NOTHING`,
		op.WorkspaceID, op.ClientSubmitID, op.ID, op.SessionID, string(op.State), string(raw),
		op.CreatedAt, op.UpdatedAt)
	if err != nil {
		return t.fail(classify("insert goal operation", err))
	}
	if tag.RowsAffected() == 0 {
		return dialect.Duplicate("insert goal operation " + op.ClientSubmitID)
	}
	return nil
}

// UpdateGoalOperation writes the lifecycle fields; the identity (action,
// digest, spec, creation) stays as first written.
func (t *tx) UpdateGoalOperation(ctx context.Context, op host.GoalOperation) error {
	cur, err := t.GoalOperation(ctx, op.WorkspaceID, op.ClientSubmitID)
	if err != nil {
		return err
	}
	cur.State, cur.Revision, cur.Error, cur.UpdatedAt = op.State, op.Revision, op.Error, op.UpdatedAt
	raw, err := json.Marshal(cur)
	if err != nil {
		return fmt.Errorf("pg: update goal operation: %w", err)
	}
	tag, err := t.tx.Exec(ctx, `UPDATE goal_operations SET state = $1, op_json = $2, updated_at = $3
		WHERE workspace_id = $4 AND client_submit_id = $5`,
		string(cur.State), string(raw), cur.UpdatedAt, op.WorkspaceID, op.ClientSubmitID)
	return t.affectedOne("update goal operation "+op.ClientSubmitID, tag, err)
}

func (t *tx) InsertGoalFence(ctx context.Context, f host.GoalFence) error {
	if t.failed != nil {
		return t.failed
	}
	tag, err := t.tx.Exec(ctx, `INSERT INTO goal_fences (workspace_id, session_id, operation_id,
		revision, by_operation, state, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT DO NOTHING`,
		f.WorkspaceID, f.SessionID, f.OperationID, f.Revision, f.ByOperation, string(f.State),
		f.CreatedAt, f.UpdatedAt)
	if err != nil {
		return t.fail(classify("insert goal fence", err))
	}
	if tag.RowsAffected() == 0 {
		return dialect.Duplicate("insert goal fence " + f.OperationID)
	}
	return nil
}

func (t *tx) UpdateGoalFence(ctx context.Context, f host.GoalFence) error {
	if t.failed != nil {
		return t.failed
	}
	tag, err := t.tx.Exec(ctx, `UPDATE goal_fences SET state = $1, updated_at = $2
		WHERE workspace_id = $3 AND session_id = $4 AND operation_id = $5 AND revision = $6`,
		string(f.State), f.UpdatedAt, f.WorkspaceID, f.SessionID, f.OperationID, f.Revision)
	return t.affectedOne("update goal fence "+f.OperationID, tag, err)
}

func (t *tx) DeleteGoalFence(ctx context.Context, ws, sessionID, operationID string, revision int64, byOperation string) error {
	if t.failed != nil {
		return t.failed
	}
	tag, err := t.tx.Exec(ctx, `DELETE FROM goal_fences WHERE workspace_id = $1 AND session_id = $2
		AND operation_id = $3 AND revision = $4 AND by_operation = $5`, ws, sessionID, operationID, revision, byOperation)
	return t.affectedOne("delete goal fence "+operationID, tag, err)
}

// GoalFenced reports whether the exact goal identity is fenced (pending or
// done): a fenced identity never arms or advances a turn again.
func (t *tx) GoalFenced(ctx context.Context, ws, sessionID, operationID string, revision int64) (bool, error) {
	if t.failed != nil {
		return false, t.failed
	}
	var n int
	err := t.tx.QueryRow(ctx, `SELECT COUNT(*) FROM goal_fences WHERE workspace_id = $1 AND session_id = $2
		AND operation_id = $3 AND revision = $4`, ws, sessionID, operationID, revision).Scan(&n)
	if err != nil {
		return false, t.fail(classify("goal fenced", err))
	}
	return n > 0, nil
}

// goalScan is one recovery scan's result: the decodable records and the
// quarantine candidates.
type goalScan[T any] struct {
	out []T
	bad []host.Quarantined
}

// LiveGoals lists the goal records whose goal is active, in every
// workspace, of sessions that are not deleted (a tombstoned session's goal
// keeps its bytes, restore is exact, but the loop never looks at it),
// except quarantined ones; an undecodable record comes back as
// a quarantine candidate so one poisoned record never stalls the rest.
func (s *Store) LiveGoals(ctx context.Context) ([]host.GoalState, []host.Quarantined, error) {
	d, err := withPool(ctx, s, func(q querier) (sqlstore.Decoded[host.GoalState], error) {
		return queryRows(ctx, q, "live goals", `SELECT g.workspace_id, g.session_id, g.state_json FROM goals g
			JOIN sessions s ON s.workspace_id = g.workspace_id AND s.id = g.session_id
			WHERE g.status = $1 AND s.deleted_at IS NULL
			AND NOT EXISTS (SELECT 1 FROM quarantine q
				WHERE q.kind = $2 AND q.key = g.workspace_id || '/' || g.session_id)
			ORDER BY g.updated_at`, []any{string(host.GoalActive), host.QuarantineKindGoal},
			sqlstore.JSONRecords(host.QuarantineKindGoal, sqlstore.DecodeGoal))
	})
	return d.Records, d.Bad, err
}

// PendingGoalFences lists fences not yet done, oldest first.
func (s *Store) PendingGoalFences(ctx context.Context) ([]host.GoalFence, error) {
	return withPool(ctx, s, func(q querier) ([]host.GoalFence, error) {
		return queryRows(ctx, q, "pending goal fences", `SELECT workspace_id, session_id, operation_id, revision,
			by_operation, state, created_at, updated_at FROM goal_fences WHERE state = $1
			ORDER BY created_at`, []any{string(host.GoalFencePending)}, sqlstore.All(sqlstore.GoalFence(timestamptz)))
	})
}

// PendingGoalOperations lists operations still accepted, oldest first,
// except quarantined ones; an undecodable one comes back as a quarantine
// candidate.
func (s *Store) PendingGoalOperations(ctx context.Context) ([]host.GoalOperation, []host.Quarantined, error) {
	d, err := withPool(ctx, s, func(q querier) (sqlstore.Decoded[host.GoalOperation], error) {
		return queryRows(ctx, q, "pending goal operations", `SELECT o.workspace_id, o.client_submit_id, o.op_json FROM goal_operations o
			WHERE o.state = $1
			AND NOT EXISTS (SELECT 1 FROM quarantine q
				WHERE q.kind = $2 AND q.key = o.workspace_id || '/' || o.client_submit_id)
			ORDER BY o.created_at`, []any{string(host.GoalOpAccepted), host.QuarantineKindGoalOperation},
			sqlstore.JSONRecords(host.QuarantineKindGoalOperation, sqlstore.DecodeGoalOp))
	})
	return d.Records, d.Bad, err
}

// GoalFenced is tx.GoalFenced outside a transaction (goal.get's held).
func (s *Store) GoalFenced(ctx context.Context, ws, sessionID, operationID string, revision int64) (bool, error) {
	return withPool(ctx, s, func(q querier) (bool, error) {
		var n int
		err := q.QueryRow(ctx, `SELECT COUNT(*) FROM goal_fences WHERE workspace_id = $1 AND session_id = $2
			AND operation_id = $3 AND revision = $4`, ws, sessionID, operationID, revision).Scan(&n)
		if err != nil {
			return false, classify("goal fenced", err)
		}
		return n > 0, nil
	})
}
