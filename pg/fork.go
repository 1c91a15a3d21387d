package pg

import (
	"context"

	"github.com/ensemble-dev/ensemble/host"
)

// Session fork operations and lineage (migrations/00013_lineage.sql).

var _ host.ForkTx = (*tx)(nil)

const forkCols = `workspace_id, client_submit_id, source_session_id, source_turn_id,
	target_session_id, lineage_id, lineage_seq, base_title, state, reason,
	provider_session_id, created_by, created_at, updated_at`

func (t *tx) forkOpWhere(ctx context.Context, what, where string, args ...any) (host.ForkOp, error) {
	if t.failed != nil {
		return host.ForkOp{}, t.failed
	}
	var (
		op    host.ForkOp
		state string
	)
	err := t.tx.QueryRow(ctx, `SELECT `+forkCols+` FROM session_forks WHERE `+where, args...).Scan(
		&op.WorkspaceID, &op.ClientSubmitID, &op.SourceSessionID, &op.SourceTurnID,
		&op.TargetSessionID, &op.LineageID, &op.LineageSeq, &op.BaseTitle, &state, &op.Reason,
		&op.ProviderSessionID, &op.CreatedBy, &op.CreatedAt, &op.UpdatedAt)
	if isNoRows(err) {
		return host.ForkOp{}, dialect.NotFound(what)
	}
	if err != nil {
		return host.ForkOp{}, t.fail(classify(what, err))
	}
	op.State, op.CreatedAt, op.UpdatedAt = host.ForkState(state), utc(op.CreatedAt), utc(op.UpdatedAt)
	return op, nil
}

func (t *tx) ForkOp(ctx context.Context, ws, clientSubmitID string) (host.ForkOp, error) {
	return t.forkOpWhere(ctx, "fork operation", `workspace_id = $1 AND client_submit_id = $2`, ws, clientSubmitID)
}

func (t *tx) SessionLineage(ctx context.Context, ws, sessionID string) (host.ForkOp, error) {
	return t.forkOpWhere(ctx, "session lineage", `workspace_id = $1 AND target_session_id = $2 AND state = 'committed'`, ws, sessionID)
}

func (t *tx) InsertForkOp(ctx context.Context, op host.ForkOp) error {
	if t.failed != nil {
		return t.failed
	}
	_, err := t.tx.Exec(ctx, `INSERT INTO session_forks (`+forkCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`,
		op.WorkspaceID, op.ClientSubmitID, op.SourceSessionID, op.SourceTurnID, op.TargetSessionID,
		op.LineageID, op.LineageSeq, op.BaseTitle, string(op.State), op.Reason, op.ProviderSessionID,
		op.CreatedBy, op.CreatedAt, op.UpdatedAt)
	if err != nil {
		return t.fail(classify("insert fork operation", err))
	}
	return nil
}

func (t *tx) UpdateForkOp(ctx context.Context, op host.ForkOp) error {
	if t.failed != nil {
		return t.failed
	}
	tag, err := t.tx.Exec(ctx, `UPDATE session_forks SET state = $1, reason = $2,
		provider_session_id = $3, updated_at = $4 WHERE workspace_id = $5 AND client_submit_id = $6`,
		string(op.State), op.Reason, op.ProviderSessionID, op.UpdatedAt, op.WorkspaceID, op.ClientSubmitID)
	return t.affectedOne("update fork operation", tag, err)
}

func (t *tx) MaxLineageSeq(ctx context.Context, ws, lineageID string) (int64, error) {
	if t.failed != nil {
		return 0, t.failed
	}
	var n *int64
	err := t.tx.QueryRow(ctx, `SELECT MAX(lineage_seq) FROM session_forks
		WHERE workspace_id = $1 AND lineage_id = $2`, ws, lineageID).Scan(&n)
	if err != nil {
		return 0, t.fail(classify("lineage sequence", err))
	}
	if n == nil {
		return 0, nil
	}
	return *n, nil
}
