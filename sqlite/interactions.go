package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/internal/sqlcols"
	"github.com/ensemble-dev/ensemble/internal/sqlstore"
)

// Interactions and durable runtime operations (host/ports_interactions.go
// describes the semantics every store implements).

var (
	_ host.InteractionStore = (*Store)(nil)
	_ host.InteractionTx    = (*tx)(nil)
)

const interactionCols = sqlcols.Interactions

func scanInteraction(sc scanner) (host.Interaction, error) {
	var (
		i                    host.Interaction
		kind, state, options string
		tool, response       sql.NullString
		answeredAt           sql.NullInt64
		created, updated     int64
	)
	err := sc.Scan(&i.WorkspaceID, &i.SessionID, &i.TurnID, &i.RequestID, &i.RootSessionID, &kind,
		&i.Title, &i.Prompt, &options, &tool, &state, &response, &i.AnsweredBy, &i.AnsweredByName,
		&answeredAt, &i.Resolution, &i.OperationID, &created, &updated)
	if err != nil {
		return host.Interaction{}, err
	}
	i.Kind, i.State = host.InteractionKind(kind), host.InteractionState(state)
	i.AnsweredAt, i.CreatedAt, i.UpdatedAt = fromMSPtr(answeredAt), fromMS(created), fromMS(updated)
	what := "interaction " + i.WorkspaceID + "/" + i.SessionID + "/" + i.TurnID + "/" + i.RequestID
	if err := json.Unmarshal([]byte(options), &i.Options); err != nil {
		return i, &sqlstore.DecodeError{What: what, Err: fmt.Errorf("options: %w", err)}
	}
	if tool.Valid {
		i.Tool = new(host.ToolCall)
		if err := json.Unmarshal([]byte(tool.String), i.Tool); err != nil {
			return i, &sqlstore.DecodeError{What: what, Err: fmt.Errorf("tool: %w", err)}
		}
	}
	if response.Valid {
		i.Response = new(host.InteractionResponse)
		if err := json.Unmarshal([]byte(response.String), i.Response); err != nil {
			return i, &sqlstore.DecodeError{What: what, Err: fmt.Errorf("response: %w", err)}
		}
	}
	return i, nil
}

func getInteraction(ctx context.Context, q querier, ref host.InteractionRef) (host.Interaction, error) {
	return sqlstore.One(dialect, q.QueryRowContext(ctx, `SELECT `+interactionCols+` FROM interactions
		WHERE workspace_id = ? AND session_id = ? AND turn_id = ? AND request_id = ?`,
		ref.WorkspaceID, ref.SessionID, ref.TurnID, ref.RequestID), scanInteraction, "interaction "+ref.RequestID, "get interaction")
}

// GetInteraction reads one interaction by its complete identity.
func (s *Store) GetInteraction(ctx context.Context, ref host.InteractionRef) (host.Interaction, error) {
	r, err := s.reader()
	if err != nil {
		return host.Interaction{}, err
	}
	return getInteraction(ctx, r, ref)
}

func (t *tx) Interaction(ctx context.Context, ref host.InteractionRef) (host.Interaction, error) {
	return getInteraction(ctx, t.tx, ref)
}

func (t *tx) InsertInteraction(ctx context.Context, i host.Interaction) error {
	options, err := sqlstore.EncodeJSON(i.Options)
	if err != nil {
		return fmt.Errorf("sqlite: insert interaction: %w", err)
	}
	tool, err := sqlstore.NullJSON(i.Tool)
	if err != nil {
		return fmt.Errorf("sqlite: insert interaction: %w", err)
	}
	response, err := sqlstore.NullJSON(i.Response)
	if err != nil {
		return fmt.Errorf("sqlite: insert interaction: %w", err)
	}
	_, err = t.tx.ExecContext(ctx, `INSERT INTO interactions (`+interactionCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		i.WorkspaceID, i.SessionID, i.TurnID, i.RequestID, i.RootSessionID, string(i.Kind),
		i.Title, i.Prompt, options, tool, string(i.State), response, i.AnsweredBy, i.AnsweredByName,
		msPtr(i.AnsweredAt), i.Resolution, i.OperationID, ms(i.CreatedAt), ms(i.UpdatedAt))
	return classify("insert interaction", err)
}

// UpdateInteraction is a compare-and-set on the stored state.
func (t *tx) UpdateInteraction(ctx context.Context, i host.Interaction, from host.InteractionState) error {
	response, err := sqlstore.NullJSON(i.Response)
	if err != nil {
		return fmt.Errorf("sqlite: update interaction: %w", err)
	}
	res, err := t.tx.ExecContext(ctx, `UPDATE interactions SET state = ?, response_json = ?,
		answered_by = ?, answered_by_name = ?, answered_at = ?, resolution = ?, operation_id = ?,
		updated_at = ?
		WHERE workspace_id = ? AND session_id = ? AND turn_id = ? AND request_id = ? AND state = ?`,
		string(i.State), response, i.AnsweredBy, i.AnsweredByName, msPtr(i.AnsweredAt), i.Resolution,
		i.OperationID, ms(i.UpdatedAt), i.WorkspaceID, i.SessionID, i.TurnID, i.RequestID, string(from))
	if err != nil {
		return classify("update interaction", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return classify("update interaction", err)
	}
	if n == 1 {
		return nil
	}
	if _, err := getInteraction(ctx, t.tx, i.Ref()); err != nil {
		return err
	}
	return fmt.Errorf("sqlite: update interaction %s: state is not %s: %w", i.RequestID, from, host.ErrConflict)
}

// TurnInteractions lists one Turn's interactions by request id.
func (t *tx) TurnInteractions(ctx context.Context, ws, sessionID, turnID string) ([]host.Interaction, error) {
	return queryInteractions(ctx, t.tx, `SELECT `+interactionCols+` FROM interactions
		WHERE workspace_id = ? AND session_id = ? AND turn_id = ? ORDER BY request_id`, ws, sessionID, turnID)
}

// SettleAhead does nothing: a read costs no round trip here.
func (t *tx) SettleAhead(context.Context, string, string, string) {}

// SessionInteractions lists a session's interactions of the Turns whose
// seq is in [fromSeq, toSeq], in the order the agent asked.
func (s *Store) SessionInteractions(ctx context.Context, ws, sessionID string, fromSeq, toSeq int64) ([]host.Interaction, error) {
	r, err := s.reader()
	if err != nil {
		return nil, err
	}
	return queryInteractions(ctx, r, `SELECT `+sqlcols.Prefixed("i.", interactionCols)+` FROM interactions i
		JOIN turns t ON t.workspace_id = i.workspace_id AND t.session_id = i.session_id AND t.id = i.turn_id
		WHERE i.workspace_id = ? AND i.session_id = ? AND t.seq BETWEEN ? AND ?
		ORDER BY t.seq, i.created_at, i.request_id`, ws, sessionID, fromSeq, toSeq)
}

func queryInteractions(ctx context.Context, q querier, query string, args ...any) ([]host.Interaction, error) {
	return queryRows(ctx, q, "list interactions", query, args, sqlstore.All(scanInteraction))
}

// LatestTurn is the session's Turn with the highest seq.
func (t *tx) LatestTurn(ctx context.Context, ws, sessionID string) (host.Turn, error) {
	return latestTurn(ctx, t.tx, ws, sessionID)
}

func latestTurn(ctx context.Context, q querier, ws, sessionID string) (host.Turn, error) {
	return sqlstore.One(dialect, q.QueryRowContext(ctx, `SELECT `+turnCols+` FROM turns
		WHERE workspace_id = ? AND session_id = ? ORDER BY seq DESC LIMIT 1`, ws, sessionID), scanTurn, "latest turn of "+sessionID, "latest turn")
}

// InteractionTree reads the root, its latest Turn and the latest-Turn
// interactions of every session in the tree inside one read transaction.
func (s *Store) InteractionTree(ctx context.Context, ws, rootSessionID string) (host.InteractionTree, error) {
	r, err := s.reader()
	if err != nil {
		return host.InteractionTree{}, err
	}
	rtx, err := r.BeginTx(ctx, nil)
	if err != nil {
		return host.InteractionTree{}, classify("begin read", err)
	}
	defer func() { _ = rtx.Rollback() }()

	root, err := getSession(ctx, rtx, ws, rootSessionID)
	if err != nil {
		return host.InteractionTree{}, err
	}
	if root.Provisional || root.DeletedAt != nil {
		return host.InteractionTree{}, dialect.NotFound("session " + rootSessionID)
	}
	tree := host.InteractionTree{WorkspaceID: ws, RootSessionID: rootSessionID, Interactions: []host.Interaction{}}
	if t, err := latestTurn(ctx, rtx, ws, rootSessionID); err == nil {
		if !t.Retracted {
			tree.RootTurnID = t.ID
		}
	} else if !errors.Is(err, host.ErrNotFound) {
		return host.InteractionTree{}, err
	}
	// Every live session of the tree (the root and its descendants) with
	// its latest Turn; a retracted latest Turn contributes nothing.
	tree.Interactions, err = queryInteractions(ctx, rtx, `WITH latest AS (
			SELECT s.id AS sid,
				(SELECT t.id FROM turns t WHERE t.workspace_id = s.workspace_id AND t.session_id = s.id
					ORDER BY t.seq DESC LIMIT 1) AS tid,
				(SELECT t.retracted FROM turns t WHERE t.workspace_id = s.workspace_id AND t.session_id = s.id
					ORDER BY t.seq DESC LIMIT 1) AS retracted
			FROM sessions s
			WHERE s.workspace_id = ? AND (s.id = ? OR s.root_id = ?)
				AND s.deleted_at IS NULL AND s.provisional = 0
		)
		SELECT `+sqlcols.Prefixed("i.", interactionCols)+` FROM interactions i
		JOIN latest l ON i.session_id = l.sid AND i.turn_id = l.tid
		WHERE i.workspace_id = ? AND l.retracted = 0
		ORDER BY i.session_id, i.turn_id, i.request_id`, ws, rootSessionID, rootSessionID, ws)
	if err != nil {
		return host.InteractionTree{}, err
	}
	return tree, nil
}

// ---- runtime operations ----

const operationCols = sqlcols.Operations

// QuarantineKindOperation is the Quarantined.Kind of a runtime operation.
const QuarantineKindOperation = host.QuarantineKindOperation

func scanOperation(sc scanner) (host.RuntimeOperation, error) {
	var (
		op                      host.RuntimeOperation
		response, state, result string
		followUp                sql.NullString
		next, created, updated  int64
		leaseExp                sql.NullInt64
	)
	err := sc.Scan(&op.WorkspaceID, &op.ID, &op.Kind, &op.SessionID, &op.TurnID, &op.RequestID,
		&response, &op.RespondedBy, &op.RespondedByName, &state, &op.Attempts, &next,
		&op.LeaseReplica, &op.LeaseEpoch, &leaseExp, &result, &op.Reason, &followUp,
		&op.FollowUpTurnID, &op.LastError, &created, &updated)
	if err != nil {
		return host.RuntimeOperation{}, err
	}
	op.State, op.Result = host.OperationState(state), host.DeliveryResult(result)
	op.NextAttemptAt, op.LeaseExpiresAt = fromMS(next), fromMSPtr(leaseExp)
	op.CreatedAt, op.UpdatedAt = fromMS(created), fromMS(updated)
	what := "runtime operation " + op.WorkspaceID + "/" + op.ID
	if err := json.Unmarshal([]byte(response), &op.Response); err != nil {
		return op, &sqlstore.DecodeError{What: what, Err: fmt.Errorf("response: %w", err)}
	}
	if followUp.Valid {
		op.FollowUp = new(host.MessageContent)
		if err := json.Unmarshal([]byte(followUp.String), op.FollowUp); err != nil {
			return op, &sqlstore.DecodeError{What: what, Err: fmt.Errorf("follow-up: %w", err)}
		}
	}
	switch op.State {
	case host.OperationPrepared, host.OperationLeased, host.OperationCompleted, host.OperationFailed:
	default:
		return op, &sqlstore.DecodeError{What: what, Err: fmt.Errorf("invalid state %q", op.State)}
	}
	return op, nil
}

func getOperation(ctx context.Context, q querier, ws, id string) (host.RuntimeOperation, error) {
	return sqlstore.One(dialect, q.QueryRowContext(ctx, `SELECT `+operationCols+` FROM runtime_operations
		WHERE workspace_id = ? AND id = ?`, ws, id), scanOperation, "runtime operation "+id, "get runtime operation")
}

// GetRuntimeOperation reads one operation.
func (s *Store) GetRuntimeOperation(ctx context.Context, ws, id string) (host.RuntimeOperation, error) {
	r, err := s.reader()
	if err != nil {
		return host.RuntimeOperation{}, err
	}
	return getOperation(ctx, r, ws, id)
}

func (t *tx) RuntimeOperation(ctx context.Context, ws, id string) (host.RuntimeOperation, error) {
	return getOperation(ctx, t.tx, ws, id)
}

func (t *tx) InsertRuntimeOperation(ctx context.Context, op host.RuntimeOperation) error {
	response, followUp, err := sqlstore.OperationArgs("sqlite", op)
	if err != nil {
		return err
	}
	_, err = t.tx.ExecContext(ctx, `INSERT INTO runtime_operations (`+operationCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		op.WorkspaceID, op.ID, op.Kind, op.SessionID, op.TurnID, op.RequestID, response,
		op.RespondedBy, op.RespondedByName, string(op.State), op.Attempts, ms(op.NextAttemptAt),
		op.LeaseReplica, op.LeaseEpoch, msPtr(op.LeaseExpiresAt), string(op.Result), op.Reason,
		followUp, op.FollowUpTurnID, op.LastError, ms(op.CreatedAt), ms(op.UpdatedAt))
	return classify("insert runtime operation", err)
}

// UpdateRuntimeOperation rewrites the mutable columns; the identity tuple,
// kind, response, responders and creation time stay as inserted.
func (t *tx) UpdateRuntimeOperation(ctx context.Context, op host.RuntimeOperation) error {
	_, followUp, err := sqlstore.OperationArgs("sqlite", op)
	if err != nil {
		return err
	}
	res, err := t.tx.ExecContext(ctx, `UPDATE runtime_operations SET state = ?, attempts = ?,
		next_attempt_at = ?, lease_replica = ?, lease_epoch = ?, lease_expires_at = ?, result = ?,
		reason = ?, followup_json = ?, followup_turn_id = ?, last_error = ?, updated_at = ?
		WHERE workspace_id = ? AND id = ?`,
		string(op.State), op.Attempts, ms(op.NextAttemptAt), op.LeaseReplica, op.LeaseEpoch,
		msPtr(op.LeaseExpiresAt), string(op.Result), op.Reason, followUp, op.FollowUpTurnID,
		op.LastError, ms(op.UpdatedAt), op.WorkspaceID, op.ID)
	return affectedOne("update runtime operation "+op.ID, res, err)
}

// DueRuntimeOperations returns prepared operations whose next attempt is
// due and leased ones whose lease expired, in every workspace.
func (s *Store) DueRuntimeOperations(ctx context.Context, now time.Time, limit int) ([]host.RuntimeOperation, []host.Quarantined, error) {
	r, err := s.reader()
	if err != nil {
		return nil, nil, err
	}
	limit = host.ClampLimit(limit, 64, 1000)
	d, err := queryRows(ctx, r, "due runtime operations", `SELECT `+operationCols+` FROM runtime_operations o
		WHERE ((o.state = 'prepared' AND o.next_attempt_at <= ?)
			OR (o.state = 'leased' AND o.lease_expires_at <= ?))
		AND NOT EXISTS (SELECT 1 FROM quarantine q
			WHERE q.kind = ? AND q.key = o.workspace_id || '/' || o.id)
		ORDER BY o.next_attempt_at, o.workspace_id, o.id LIMIT ?`,
		[]any{ms(now), ms(now), QuarantineKindOperation, limit}, operationRecords)
	return d.Records, d.Bad, err
}

// RequeueRuntimeOperations returns to prepared every leased operation of
// this replica's earlier processes and every expired lease.
func (s *Store) RequeueRuntimeOperations(ctx context.Context, replica string, now time.Time) (int, error) {
	w, err := s.writer()
	if err != nil {
		return 0, err
	}
	res, err := w.ExecContext(ctx, `UPDATE runtime_operations SET state = 'prepared',
		next_attempt_at = ?, lease_replica = '', lease_epoch = '', lease_expires_at = NULL, updated_at = ?
		WHERE state = 'leased' AND (lease_replica = ? OR lease_expires_at <= ?)`,
		ms(now), ms(now), replica, ms(now))
	if err != nil {
		return 0, classify("requeue runtime operations", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, classify("requeue runtime operations", err)
	}
	return int(n), nil
}

// operationRecords collects due operations, an undecodable one as a
// quarantine candidate.
var operationRecords = sqlstore.Decodable(scanOperation, QuarantineKindOperation,
	func(op host.RuntimeOperation) (string, string) { return op.WorkspaceID, op.WorkspaceID + "/" + op.ID })
