package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/ensemble-dev/ensemble/host"
)

// Session fork operations and lineage (migrations/00013_lineage.sql).

var _ host.ForkTx = (*tx)(nil)

const forkCols = `workspace_id, client_submit_id, source_session_id, source_turn_id,
	target_session_id, lineage_id, lineage_seq, base_title, state, reason,
	provider_session_id, created_by, created_at, updated_at`

func scanForkOp(sc scanner) (host.ForkOp, error) {
	var (
		op               host.ForkOp
		state            string
		created, updated int64
	)
	err := sc.Scan(&op.WorkspaceID, &op.ClientSubmitID, &op.SourceSessionID, &op.SourceTurnID,
		&op.TargetSessionID, &op.LineageID, &op.LineageSeq, &op.BaseTitle, &state, &op.Reason,
		&op.ProviderSessionID, &op.CreatedBy, &created, &updated)
	op.State, op.CreatedAt, op.UpdatedAt = host.ForkState(state), fromMS(created), fromMS(updated)
	return op, err
}

func (t *tx) forkOpWhere(ctx context.Context, what, where string, args ...any) (host.ForkOp, error) {
	op, err := scanForkOp(t.tx.QueryRowContext(ctx, `SELECT `+forkCols+` FROM session_forks WHERE `+where, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return host.ForkOp{}, dialect.NotFound(what)
	}
	return op, classify(what, err)
}

func (t *tx) ForkOp(ctx context.Context, ws, clientSubmitID string) (host.ForkOp, error) {
	return t.forkOpWhere(ctx, "fork operation", `workspace_id = ? AND client_submit_id = ?`, ws, clientSubmitID)
}

func (t *tx) SessionLineage(ctx context.Context, ws, sessionID string) (host.ForkOp, error) {
	return t.forkOpWhere(ctx, "session lineage", `workspace_id = ? AND target_session_id = ? AND state = 'committed'`, ws, sessionID)
}

func (t *tx) InsertForkOp(ctx context.Context, op host.ForkOp) error {
	_, err := t.tx.ExecContext(ctx, `INSERT INTO session_forks (`+forkCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		op.WorkspaceID, op.ClientSubmitID, op.SourceSessionID, op.SourceTurnID, op.TargetSessionID,
		op.LineageID, op.LineageSeq, op.BaseTitle, string(op.State), op.Reason, op.ProviderSessionID,
		op.CreatedBy, ms(op.CreatedAt), ms(op.UpdatedAt))
	return classify("insert fork operation", err)
}

func (t *tx) UpdateForkOp(ctx context.Context, op host.ForkOp) error {
	res, err := t.tx.ExecContext(ctx, `UPDATE session_forks SET state = ?, reason = ?,
		provider_session_id = ?, updated_at = ? WHERE workspace_id = ? AND client_submit_id = ?`,
		string(op.State), op.Reason, op.ProviderSessionID, ms(op.UpdatedAt), op.WorkspaceID, op.ClientSubmitID)
	return affectedOne("update fork operation", res, err)
}

func (t *tx) MaxLineageSeq(ctx context.Context, ws, lineageID string) (int64, error) {
	var n sql.NullInt64
	err := t.tx.QueryRowContext(ctx, `SELECT MAX(lineage_seq) FROM session_forks
		WHERE workspace_id = ? AND lineage_id = ?`, ws, lineageID).Scan(&n)
	return n.Int64, classify("lineage sequence", err)
}
