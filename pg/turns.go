package pg

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/internal/sqlcols"
	"github.com/ensemble-dev/ensemble/internal/sqlstore"
)

// The key columns come first so a row that fails to decode can still be
// named (and quarantined) by recovery.
const turnCols = sqlcols.Turns

// scanTurn reads one row and validates the values the column types cannot
// (phase, outcome). An invalid row yields a *sqlstore.DecodeError with the key
// filled in, so recovery can quarantine it instead of failing.
func scanTurn(row sqlstore.Scanner) (host.Turn, error) {
	var (
		t              host.Turn
		phase, outcome string
		labels         string
	)
	err := row.Scan(&t.WorkspaceID, &t.SessionID, &t.ID, &t.Seq, &t.Origin, &phase, &outcome,
		&t.FailureReason, &t.StopReason, &t.ProviderSessionID, &t.ProviderTurnID,
		&t.ClientSubmitID, &t.IdentityAnchorTurnID, &t.Retracted, &t.CancelRequested,
		&t.SubmittedBy, &t.CreatedAt, &t.UpdatedAt, &t.SettledAt, &t.AppliedSeq, &labels)
	if err != nil {
		return host.Turn{}, err
	}
	t.Phase, t.Outcome = host.TurnPhase(phase), host.TurnOutcome(outcome)
	t.CreatedAt, t.UpdatedAt, t.SettledAt = utc(t.CreatedAt), utc(t.UpdatedAt), utcPtr(t.SettledAt)
	return t, sqlstore.CheckTurn(&t, labels)
}

const selectTurn = `SELECT ` + turnCols + ` FROM turns
	WHERE workspace_id = $1 AND session_id = $2 AND id = $3`

func getTurn(ctx context.Context, q querier, ws, sessionID, turnID string) (host.Turn, error) {
	return sqlstore.One(dialect, q.QueryRow(ctx, selectTurn, ws, sessionID, turnID), scanTurn, "turn "+turnID, "get turn")
}

// GetTurn returns one Turn of a session in ws.
func (s *Store) GetTurn(ctx context.Context, ws, sessionID, turnID string) (host.Turn, error) {
	return withPool(ctx, s, func(q querier) (host.Turn, error) {
		return getTurn(ctx, q, ws, sessionID, turnID)
	})
}

// Turn reads a Turn after locking its session's row, so a command that
// starts from a Turn (acceptance, output, settlement) takes its locks in the
// same order as one that starts from the session, and sees the Turn as the
// previous lock holder committed it.
func (t *tx) Turn(ctx context.Context, ws, sessionID, turnID string) (host.Turn, error) {
	if t.failed != nil {
		return host.Turn{}, t.failed
	}
	if err := t.lockSession(ctx, ws, sessionID, true); err != nil {
		return host.Turn{}, err
	}
	tu, err := getTurn(ctx, t.tx, ws, sessionID, turnID)
	if err != nil && !isNotFound(err) {
		return tu, t.fail(err)
	}
	if err == nil {
		t.see("turns", ws, turnID, sessionID)
	}
	return tu, err
}

// InsertTurn goes with the next round trip as a fence: a duplicate (id,
// seq or provider identity) refuses the transaction there, or at COMMIT,
// and Update returns host.ErrDuplicate. No caller goes on in a
// transaction whose Turn insert failed, so the call need not wait for it
// (an admission inserts its Turn ahead of its claim, which does wait).
func (t *tx) InsertTurn(ctx context.Context, tu host.Turn) error {
	if t.failed != nil {
		return t.failed
	}
	labels, err := json.Marshal(tu.TurnLabels)
	if err != nil {
		return fmt.Errorf("pg: insert turn %s: encode labels: %w", tu.ID, err)
	}
	t.tx.queue(deferred{op: "insert turn " + tu.ID, sql: insertTurnSQL,
		args: []any{tu.WorkspaceID, tu.SessionID, tu.ID, tu.Seq, tu.Origin, string(tu.Phase),
			string(tu.Outcome), tu.FailureReason, tu.StopReason, tu.ProviderSessionID,
			tu.ProviderTurnID, tu.ClientSubmitID, tu.IdentityAnchorTurnID, tu.Retracted,
			tu.CancelRequested, tu.SubmittedBy, tu.CreatedAt, tu.UpdatedAt, tu.SettledAt,
			tu.AppliedSeq, string(labels)}})
	// A row this transaction inserts is as good as locked (see
	// defersUpdate); if the insert fails, so does the transaction.
	t.see("turns", tu.WorkspaceID, tu.ID, tu.SessionID)
	return nil
}

// insertTurnSQL refuses the transaction on the server when the Turn is a
// duplicate, so it may go with COMMIT.
var insertTurnSQL = fenceRows(`INSERT INTO turns (`+turnCols+`)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)
	ON CONFLICT DO NOTHING RETURNING 1`, codeFenceDuplicate)

// UpdateTurn rewrites the mutable columns. Seq, the identity anchor and the
// creation time are immutable and left as inserted; applied_seq only moves
// forward, so a Turn read earlier can never undo applied output.
func (t *tx) UpdateTurn(ctx context.Context, tu host.Turn) error {
	if t.failed != nil {
		return t.failed
	}
	labels, err := json.Marshal(tu.TurnLabels)
	if err != nil {
		return fmt.Errorf("pg: update turn %s: encode labels: %w", tu.ID, err)
	}
	return t.updateOne(ctx, rowKey{"turns", tu.WorkspaceID, tu.ID}, "update turn "+tu.ID, updateTurnSQL,
		tu.Origin, string(tu.Phase), string(tu.Outcome), tu.FailureReason, tu.StopReason,
		tu.ProviderSessionID, tu.ProviderTurnID, tu.ClientSubmitID, tu.Retracted,
		tu.CancelRequested, tu.SubmittedBy, tu.UpdatedAt, tu.SettledAt,
		tu.AppliedSeq, tu.WorkspaceID, tu.SessionID, tu.ID, string(labels))
}

const updateTurnSQL = `UPDATE turns SET origin = $1, phase = $2, outcome = $3,
	failure_reason = $4, stop_reason = $5, provider_session_id = $6, provider_turn_id = $7,
	client_submit_id = $8, retracted = $9, cancel_requested = $10, submitted_by = $11,
	updated_at = $12, settled_at = $13, applied_seq = GREATEST(applied_seq, $14), labels_json = $18
	WHERE workspace_id = $15 AND session_id = $16 AND id = $17`

// AdvanceTurn implements host.OutputTx: two columns (deferred like
// UpdateTurn when it may be).
func (t *tx) AdvanceTurn(ctx context.Context, ws, sessionID, turnID string, seq int64, at time.Time) error {
	if t.failed != nil {
		return t.failed
	}
	return t.updateOne(ctx, rowKey{"turns", ws, turnID}, "advance turn "+turnID, advanceTurnSQL,
		seq, at, ws, sessionID, turnID)
}

// ExpectOutput implements host.OutputTx: one statement, a fence sent
// with the next round trip (the append), that locks the session row as
// Tx.Turn's lock does and finds both rows as the Turn's acceptance or
// last output commit left them.
func (t *tx) ExpectOutput(ctx context.Context, ws, sessionID, turnID string, appliedSeq, messageVersion int64) error {
	if t.failed != nil {
		return t.failed
	}
	// The server refuses the transaction when the rows moved
	// (expectOutputSQL), so the fence may go with COMMIT: with an append
	// at a known offset, an output commit is one round trip.
	t.tx.queue(deferred{op: "expect output state of turn " + turnID, sql: expectOutputSQL,
		args: []any{ws, sessionID, turnID, messageVersion, appliedSeq, string(host.PhaseDurablyAccepted)}})
	// Locked and seen under the session lock once the fence passed; if it
	// fails, so does the transaction.
	t.locked[sessionKey{ws, sessionID}] = true
	t.see("turns", ws, turnID, sessionID)
	return nil
}

var expectOutputSQL = fenceRows(`SELECT 1 FROM sessions s
	JOIN turns t ON t.workspace_id = s.workspace_id AND t.session_id = s.id
	WHERE s.workspace_id = $1 AND s.id = $2 AND t.id = $3
	AND s.message_version = $4 AND t.applied_seq = $5 AND t.phase = $6
	FOR UPDATE OF s`, codeFenceNotFound)

const advanceTurnSQL = `UPDATE turns SET applied_seq = GREATEST(applied_seq, $1), updated_at = $2
	WHERE workspace_id = $3 AND session_id = $4 AND id = $5`

// ListTurns pages a session's turns newest first by seq.
func (s *Store) ListTurns(ctx context.Context, ws, sessionID string, q host.TurnQuery) (host.TurnPage, error) {
	limit := host.ClampLimit(q.Limit, 50, 200)
	query := `SELECT ` + turnCols + ` FROM turns WHERE workspace_id = $1 AND session_id = $2`
	args := []any{ws, sessionID}
	if q.Before > 0 {
		query += ` AND seq < $3`
		args = append(args, q.Before)
	}
	args = append(args, limit+1)
	query += fmt.Sprintf(` ORDER BY seq DESC LIMIT $%d`, len(args))

	return withPool(ctx, s, func(db querier) (host.TurnPage, error) {
		turns, err := queryRows(ctx, db, "list turns", query, args, sqlstore.All(scanTurn))
		return sqlstore.TurnPage(turns, limit), err
	})
}
