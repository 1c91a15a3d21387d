package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/internal/sqlcols"
	"github.com/ensemble-dev/ensemble/internal/sqlstore"
)

// The key columns come first so a row that fails to decode can still be
// named (and quarantined) by recovery.
const turnCols = sqlcols.Turns

const turnNCols = 21

// scanTurn scans into untyped values and decodes them itself, so a corrupt
// value yields a decode error for that row with its key filled in rather
// than an opaque Scan failure.
func scanTurn(sc scanner) (host.Turn, error) {
	vals := make([]any, turnNCols)
	ptrs := make([]any, turnNCols)
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := sc.Scan(ptrs...); err != nil {
		return host.Turn{}, err
	}
	return decodeTurn(vals)
}

func decodeTurn(v []any) (host.Turn, error) {
	d := decoder{vals: v}
	t := host.Turn{
		WorkspaceID:          d.str(0, "workspace_id"),
		SessionID:            d.str(1, "session_id"),
		ID:                   d.str(2, "id"),
		Seq:                  d.int(3, "seq"),
		Origin:               d.str(4, "origin"),
		Phase:                host.TurnPhase(d.str(5, "phase")),
		Outcome:              host.TurnOutcome(d.str(6, "outcome")),
		FailureReason:        d.str(7, "failure_reason"),
		StopReason:           d.str(8, "stop_reason"),
		ProviderSessionID:    d.str(9, "provider_session_id"),
		ProviderTurnID:       d.str(10, "provider_turn_id"),
		ClientSubmitID:       d.str(11, "client_submit_id"),
		IdentityAnchorTurnID: d.str(12, "identity_anchor_turn_id"),
		Retracted:            d.int(13, "retracted") != 0,
		CancelRequested:      d.int(14, "cancel_requested") != 0,
		SubmittedBy:          d.str(15, "submitted_by"),
		CreatedAt:            fromMS(d.int(16, "created_at")),
		UpdatedAt:            fromMS(d.int(17, "updated_at")),
		AppliedSeq:           d.int(19, "applied_seq"),
	}
	if v[18] != nil {
		at := fromMS(d.int(18, "settled_at"))
		t.SettledAt = &at
	}
	labels := d.str(20, "labels_json")
	if d.err != nil {
		return t, &sqlstore.DecodeError{What: "turn " + sqlstore.TurnRef(t).Key(), Err: d.err}
	}
	return t, sqlstore.CheckTurn(&t, labels)
}

// decoder converts untyped column values, keeping the first error.
type decoder struct {
	vals []any
	err  error
}

func (d *decoder) str(i int, col string) string {
	switch x := d.vals[i].(type) {
	case string:
		return x
	case []byte:
		return string(x)
	case nil:
		return ""
	case int64:
		return strconv.FormatInt(x, 10)
	}
	d.fail(col, d.vals[i])
	return ""
}

func (d *decoder) int(i int, col string) int64 {
	switch x := d.vals[i].(type) {
	case int64:
		return x
	case nil:
		return 0
	case string:
		if n, err := strconv.ParseInt(x, 10, 64); err == nil {
			return n
		}
	case []byte:
		if n, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return n
		}
	}
	d.fail(col, d.vals[i])
	return 0
}

func (d *decoder) fail(col string, v any) {
	if d.err == nil {
		d.err = fmt.Errorf("column %s: cannot decode %T %v", col, v, v)
	}
}

func getTurn(ctx context.Context, q querier, ws, sessionID, turnID string) (host.Turn, error) {
	return sqlstore.One(dialect, q.QueryRowContext(ctx, getTurnSQL, ws, sessionID, turnID), scanTurn, "turn "+turnID, "get turn")
}

const getTurnSQL = `SELECT ` + turnCols + ` FROM turns
		WHERE workspace_id = ? AND session_id = ? AND id = ?`

// GetTurn returns one Turn of a session in ws.
func (s *Store) GetTurn(ctx context.Context, ws, sessionID, turnID string) (host.Turn, error) {
	r, err := s.reader()
	if err != nil {
		return host.Turn{}, err
	}
	return getTurn(ctx, r, ws, sessionID, turnID)
}

func (t *tx) Turn(ctx context.Context, ws, sessionID, turnID string) (host.Turn, error) {
	return getTurn(ctx, t.tx, ws, sessionID, turnID)
}

func (t *tx) InsertTurn(ctx context.Context, tu host.Turn) error {
	labels, err := json.Marshal(tu.TurnLabels)
	if err != nil {
		return fmt.Errorf("sqlite: insert turn %s: encode labels: %w", tu.ID, err)
	}
	_, err = t.tx.ExecContext(ctx, `INSERT INTO turns (`+turnCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		tu.WorkspaceID, tu.SessionID, tu.ID, tu.Seq, tu.Origin, string(tu.Phase),
		string(tu.Outcome), tu.FailureReason, tu.StopReason, tu.ProviderSessionID,
		tu.ProviderTurnID, tu.ClientSubmitID, tu.IdentityAnchorTurnID, boolInt(tu.Retracted),
		boolInt(tu.CancelRequested), tu.SubmittedBy, ms(tu.CreatedAt), ms(tu.UpdatedAt),
		msPtr(tu.SettledAt), tu.AppliedSeq, string(labels))
	return classify("insert turn", err)
}

// UpdateTurn rewrites the mutable columns. Seq, the identity anchor and the
// creation time are immutable and left as inserted; applied_seq only moves
// forward, so a Turn read earlier can never undo applied output.
func (t *tx) UpdateTurn(ctx context.Context, tu host.Turn) error {
	labels, err := json.Marshal(tu.TurnLabels)
	if err != nil {
		return fmt.Errorf("sqlite: update turn %s: encode labels: %w", tu.ID, err)
	}
	res, err := t.tx.ExecContext(ctx, updateTurnSQL,
		tu.Origin, string(tu.Phase), string(tu.Outcome), tu.FailureReason, tu.StopReason,
		tu.ProviderSessionID, tu.ProviderTurnID, tu.ClientSubmitID, boolInt(tu.Retracted),
		boolInt(tu.CancelRequested), tu.SubmittedBy, ms(tu.UpdatedAt), msPtr(tu.SettledAt),
		tu.AppliedSeq, string(labels), tu.WorkspaceID, tu.SessionID, tu.ID)
	return affectedOne("update turn "+tu.ID, res, err)
}

const updateTurnSQL = `UPDATE turns SET origin = ?, phase = ?, outcome = ?,
		failure_reason = ?, stop_reason = ?, provider_session_id = ?, provider_turn_id = ?,
		client_submit_id = ?, retracted = ?, cancel_requested = ?, submitted_by = ?,
		updated_at = ?, settled_at = ?, applied_seq = max(applied_seq, ?), labels_json = ?
		WHERE workspace_id = ? AND session_id = ? AND id = ?`

// AdvanceTurn implements host.OutputTx: two columns, no index.
func (t *tx) AdvanceTurn(ctx context.Context, ws, sessionID, turnID string, seq int64, at time.Time) error {
	res, err := t.tx.ExecContext(ctx, advanceTurnSQL, seq, ms(at), ws, sessionID, turnID)
	return affectedOne("advance turn "+turnID, res, err)
}

// ExpectOutput implements host.OutputTx. The writer connection is the
// lock: the check holds until COMMIT.
func (t *tx) ExpectOutput(ctx context.Context, ws, sessionID, turnID string, appliedSeq, messageVersion int64) error {
	var one int
	err := t.tx.QueryRowContext(ctx, expectOutputSQL,
		ws, sessionID, turnID, messageVersion, appliedSeq, string(host.PhaseDurablyAccepted)).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return dialect.NotFound("expect output state of turn " + turnID)
	}
	return classify("expect output state of turn "+turnID, err)
}

const expectOutputSQL = `SELECT 1 FROM sessions s
		JOIN turns t ON t.workspace_id = s.workspace_id AND t.session_id = s.id
		WHERE s.workspace_id = ? AND s.id = ? AND t.id = ?
		AND s.message_version = ? AND t.applied_seq = ? AND t.phase = ?`

const advanceTurnSQL = `UPDATE turns SET applied_seq = max(applied_seq, ?), updated_at = ?
		WHERE workspace_id = ? AND session_id = ? AND id = ?`

// ListTurns pages a session's turns newest first by seq.
func (s *Store) ListTurns(ctx context.Context, ws, sessionID string, q host.TurnQuery) (host.TurnPage, error) {
	r, err := s.reader()
	if err != nil {
		return host.TurnPage{}, err
	}
	limit := host.ClampLimit(q.Limit, 50, 200)
	query := `SELECT ` + turnCols + ` FROM turns WHERE workspace_id = ? AND session_id = ?`
	args := []any{ws, sessionID}
	if q.Before > 0 {
		query += ` AND seq < ?`
		args = append(args, q.Before)
	}
	query += ` ORDER BY seq DESC LIMIT ?`
	args = append(args, limit+1)

	turns, err := queryRows(ctx, r, "list turns", query, args, sqlstore.All(scanTurn))
	return sqlstore.TurnPage(turns, limit), err
}
