package pg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/internal/sqlcols"
	"github.com/ensemble-dev/ensemble/internal/sqlstore"
)

// Interactions and durable runtime operations (host/ports_interactions.go
// describes the semantics every store implements; sqlite/interactions.go is
// the reference). Reads inside a transaction lock the session first, like
// Tx.Turn, so an answer, a turn's settlement and a delivery on one session
// take their locks in one order. Two answers to one interaction are decided
// by UpdateInteraction's compare-and-set on the row.

var (
	_ host.InteractionStore = (*Store)(nil)
	_ host.InteractionTx    = (*tx)(nil)
)

const interactionCols = sqlcols.Interactions

func scanInteraction(row sqlstore.Scanner) (host.Interaction, error) {
	var (
		i                    host.Interaction
		kind, state, options string
		tool, response       *string
	)
	err := row.Scan(&i.WorkspaceID, &i.SessionID, &i.TurnID, &i.RequestID, &i.RootSessionID, &kind,
		&i.Title, &i.Prompt, &options, &tool, &state, &response, &i.AnsweredBy, &i.AnsweredByName,
		&i.AnsweredAt, &i.Resolution, &i.OperationID, &i.CreatedAt, &i.UpdatedAt)
	if err != nil {
		return host.Interaction{}, err
	}
	i.Kind, i.State = host.InteractionKind(kind), host.InteractionState(state)
	i.AnsweredAt, i.CreatedAt, i.UpdatedAt = utcPtr(i.AnsweredAt), utc(i.CreatedAt), utc(i.UpdatedAt)
	what := "interaction " + i.WorkspaceID + "/" + i.SessionID + "/" + i.TurnID + "/" + i.RequestID
	if err := json.Unmarshal([]byte(options), &i.Options); err != nil {
		return i, &sqlstore.DecodeError{What: what, Err: fmt.Errorf("options: %w", err)}
	}
	if tool != nil {
		i.Tool = new(host.ToolCall)
		if err := json.Unmarshal([]byte(*tool), i.Tool); err != nil {
			return i, &sqlstore.DecodeError{What: what, Err: fmt.Errorf("tool: %w", err)}
		}
	}
	if response != nil {
		i.Response = new(host.InteractionResponse)
		if err := json.Unmarshal([]byte(*response), i.Response); err != nil {
			return i, &sqlstore.DecodeError{What: what, Err: fmt.Errorf("response: %w", err)}
		}
	}
	return i, nil
}

func getInteraction(ctx context.Context, q querier, ref host.InteractionRef) (host.Interaction, error) {
	return sqlstore.One(dialect, q.QueryRow(ctx, `SELECT `+interactionCols+` FROM interactions
		WHERE workspace_id = $1 AND session_id = $2 AND turn_id = $3 AND request_id = $4`,
		ref.WorkspaceID, ref.SessionID, ref.TurnID, ref.RequestID), scanInteraction, "interaction "+ref.RequestID, "get interaction")
}

// GetInteraction reads one interaction by its complete identity.
func (s *Store) GetInteraction(ctx context.Context, ref host.InteractionRef) (host.Interaction, error) {
	return withPool(ctx, s, func(q querier) (host.Interaction, error) { return getInteraction(ctx, q, ref) })
}

// result records a statement failure (not a missing row) in the Tx.
func (t *tx) result(err error) error {
	if err != nil && !isNotFound(err) {
		return t.fail(err)
	}
	return err
}

func (t *tx) Interaction(ctx context.Context, ref host.InteractionRef) (host.Interaction, error) {
	if t.failed != nil {
		return host.Interaction{}, t.failed
	}
	if err := t.lockSession(ctx, ref.WorkspaceID, ref.SessionID, false); err != nil {
		return host.Interaction{}, err
	}
	i, err := getInteraction(ctx, t.tx, ref)
	return i, t.result(err)
}

func (t *tx) InsertInteraction(ctx context.Context, i host.Interaction) error {
	if t.failed != nil {
		return t.failed
	}
	options, err := sqlstore.EncodeJSON(i.Options)
	if err != nil {
		return fmt.Errorf("pg: insert interaction: %w", err)
	}
	tool, err := sqlstore.NullJSON(i.Tool)
	if err != nil {
		return fmt.Errorf("pg: insert interaction: %w", err)
	}
	response, err := sqlstore.NullJSON(i.Response)
	if err != nil {
		return fmt.Errorf("pg: insert interaction: %w", err)
	}
	tag, err := t.tx.Exec(ctx, `INSERT INTO interactions (`+interactionCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)
		ON CONFLICT DO NOTHING`,
		i.WorkspaceID, i.SessionID, i.TurnID, i.RequestID, i.RootSessionID, string(i.Kind),
		i.Title, i.Prompt, options, tool, string(i.State), response, i.AnsweredBy, i.AnsweredByName,
		i.AnsweredAt, i.Resolution, i.OperationID, i.CreatedAt, i.UpdatedAt)
	if err != nil {
		return t.fail(classify("insert interaction", err))
	}
	if tag.RowsAffected() == 0 {
		return dialect.Duplicate("insert interaction " + i.RequestID)
	}
	return nil
}

// UpdateInteraction is a compare-and-set on the stored state: a concurrent
// writer's UPDATE waits for this row's lock and then re-checks the state,
// so of two answers exactly one sees `from`; the other gets
// host.ErrConflict without aborting its transaction.
func (t *tx) UpdateInteraction(ctx context.Context, i host.Interaction, from host.InteractionState) error {
	if t.failed != nil {
		return t.failed
	}
	response, err := sqlstore.NullJSON(i.Response)
	if err != nil {
		return fmt.Errorf("pg: update interaction: %w", err)
	}
	tag, err := t.tx.Exec(ctx, `UPDATE interactions SET state = $1, response_json = $2,
		answered_by = $3, answered_by_name = $4, answered_at = $5, resolution = $6, operation_id = $7,
		updated_at = $8
		WHERE workspace_id = $9 AND session_id = $10 AND turn_id = $11 AND request_id = $12 AND state = $13`,
		string(i.State), response, i.AnsweredBy, i.AnsweredByName, i.AnsweredAt, i.Resolution,
		i.OperationID, i.UpdatedAt, i.WorkspaceID, i.SessionID, i.TurnID, i.RequestID, string(from))
	if err != nil {
		return t.fail(classify("update interaction", err))
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	if _, err := getInteraction(ctx, t.tx, i.Ref()); err != nil {
		return t.result(err)
	}
	return fmt.Errorf("pg: update interaction %s: state is not %s: %w", i.RequestID, from, host.ErrConflict)
}

// TurnInteractions lists one Turn's interactions by request id.
func (t *tx) TurnInteractions(ctx context.Context, ws, sessionID, turnID string) ([]host.Interaction, error) {
	if t.failed != nil {
		return nil, t.failed
	}
	if err := t.lockSession(ctx, ws, sessionID, false); err != nil {
		return nil, err
	}
	// A settlement reads the Turn's queue entries and the session's queue
	// next: one statement tells which of the three has rows, and only
	// those are read (settleahead.go).
	p, err := t.settleProbe(ctx, ws, sessionID, turnID)
	if err != nil {
		return nil, t.result(err)
	}
	ahead := &queueAhead{ws: ws, session: sessionID, turn: turnID, queue: host.Queue{Revision: p.revision, FenceTurnID: p.fence}}
	if p.queued {
		t.readEntriesAhead(ahead)
	}
	var out []host.Interaction
	if p.queued || p.interactions {
		out, err = queryInteractions(ctx, t.tx, `SELECT `+interactionCols+` FROM interactions
			WHERE workspace_id = $1 AND session_id = $2 AND turn_id = $3 ORDER BY request_id`, ws, sessionID, turnID)
	}
	if err == nil {
		ahead.ops = t.tx.ops
		t.queueAhead = ahead
	}
	return out, t.result(err)
}

// SessionInteractions lists a session's interactions of the Turns whose
// seq is in [fromSeq, toSeq], in the order the agent asked.
func (s *Store) SessionInteractions(ctx context.Context, ws, sessionID string, fromSeq, toSeq int64) ([]host.Interaction, error) {
	return withPool(ctx, s, func(q querier) ([]host.Interaction, error) {
		return queryInteractions(ctx, q, `SELECT `+sqlcols.Prefixed("i.", interactionCols)+` FROM interactions i
			JOIN turns t ON t.workspace_id = i.workspace_id AND t.session_id = i.session_id AND t.id = i.turn_id
			WHERE i.workspace_id = $1 AND i.session_id = $2 AND t.seq BETWEEN $3 AND $4
			ORDER BY t.seq, i.created_at, i.request_id`, ws, sessionID, fromSeq, toSeq)
	})
}

func queryInteractions(ctx context.Context, q querier, query string, args ...any) ([]host.Interaction, error) {
	return queryRows(ctx, q, "list interactions", query, args, sqlstore.All(scanInteraction))
}

// LatestTurn is the session's Turn with the highest seq.
func (t *tx) LatestTurn(ctx context.Context, ws, sessionID string) (host.Turn, error) {
	if t.failed != nil {
		return host.Turn{}, t.failed
	}
	if err := t.lockSession(ctx, ws, sessionID, false); err != nil {
		return host.Turn{}, err
	}
	tu, err := latestTurn(ctx, t.tx, ws, sessionID)
	return tu, t.result(err)
}

func latestTurn(ctx context.Context, q querier, ws, sessionID string) (host.Turn, error) {
	return sqlstore.One(dialect, q.QueryRow(ctx, `SELECT `+turnCols+` FROM turns
		WHERE workspace_id = $1 AND session_id = $2 ORDER BY seq DESC LIMIT 1`, ws, sessionID), scanTurn, "latest turn of "+sessionID, "latest turn")
}

// InteractionTree reads the root, its latest Turn and the latest-Turn
// interactions of every session in the tree inside one read-only
// REPEATABLE READ transaction: all three reads see one snapshot.
func (s *Store) InteractionTree(ctx context.Context, ws, rootSessionID string) (host.InteractionTree, error) {
	return withSnapshot(ctx, s, func(q querier) (host.InteractionTree, error) {
		return interactionTree(ctx, q, ws, rootSessionID)
	})
}

func interactionTree(ctx context.Context, q querier, ws, rootSessionID string) (host.InteractionTree, error) {
	root, err := getSession(ctx, q, selectSession, ws, rootSessionID)
	if err != nil {
		return host.InteractionTree{}, err
	}
	if root.Provisional || root.DeletedAt != nil {
		return host.InteractionTree{}, dialect.NotFound("session " + rootSessionID)
	}
	tree := host.InteractionTree{WorkspaceID: ws, RootSessionID: rootSessionID, Interactions: []host.Interaction{}}
	if t, err := latestTurn(ctx, q, ws, rootSessionID); err == nil {
		if !t.Retracted {
			tree.RootTurnID = t.ID
		}
	} else if !errors.Is(err, host.ErrNotFound) {
		return host.InteractionTree{}, err
	}
	// Every live session of the tree (the root and its descendants) with
	// its latest Turn; a retracted latest Turn contributes nothing.
	tree.Interactions, err = queryInteractions(ctx, q, `SELECT `+sqlcols.Prefixed("i.", interactionCols)+`
		FROM sessions s
		CROSS JOIN LATERAL (SELECT t.id, t.retracted FROM turns t
			WHERE t.workspace_id = s.workspace_id AND t.session_id = s.id
			ORDER BY t.seq DESC LIMIT 1) l
		JOIN interactions i ON i.workspace_id = s.workspace_id AND i.session_id = s.id AND i.turn_id = l.id
		WHERE s.workspace_id = $1 AND (s.id = $2 OR s.root_id = $2)
			AND s.deleted_at IS NULL AND NOT s.provisional AND NOT l.retracted
		ORDER BY i.session_id, i.turn_id, i.request_id`, ws, rootSessionID)
	if err != nil {
		return host.InteractionTree{}, err
	}
	return tree, nil
}

// ---- runtime operations ----

const operationCols = sqlcols.Operations

// QuarantineKindOperation is the Quarantined.Kind of a runtime operation.
const QuarantineKindOperation = host.QuarantineKindOperation

func scanOperation(row sqlstore.Scanner) (host.RuntimeOperation, error) {
	var (
		op                      host.RuntimeOperation
		response, state, result string
		followUp                *string
	)
	err := row.Scan(&op.WorkspaceID, &op.ID, &op.Kind, &op.SessionID, &op.TurnID, &op.RequestID,
		&response, &op.RespondedBy, &op.RespondedByName, &state, &op.Attempts, &op.NextAttemptAt,
		&op.LeaseReplica, &op.LeaseEpoch, &op.LeaseExpiresAt, &result, &op.Reason, &followUp,
		&op.FollowUpTurnID, &op.LastError, &op.CreatedAt, &op.UpdatedAt)
	if err != nil {
		return host.RuntimeOperation{}, err
	}
	op.State, op.Result = host.OperationState(state), host.DeliveryResult(result)
	op.NextAttemptAt, op.LeaseExpiresAt = utc(op.NextAttemptAt), utcPtr(op.LeaseExpiresAt)
	op.CreatedAt, op.UpdatedAt = utc(op.CreatedAt), utc(op.UpdatedAt)
	what := "runtime operation " + op.WorkspaceID + "/" + op.ID
	if err := json.Unmarshal([]byte(response), &op.Response); err != nil {
		return op, &sqlstore.DecodeError{What: what, Err: fmt.Errorf("response: %w", err)}
	}
	if followUp != nil {
		op.FollowUp = new(host.MessageContent)
		if err := json.Unmarshal([]byte(*followUp), op.FollowUp); err != nil {
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
	return sqlstore.One(dialect, q.QueryRow(ctx, `SELECT `+operationCols+` FROM runtime_operations
		WHERE workspace_id = $1 AND id = $2`, ws, id), scanOperation, "runtime operation "+id, "get runtime operation")
}

// GetRuntimeOperation reads one operation.
func (s *Store) GetRuntimeOperation(ctx context.Context, ws, id string) (host.RuntimeOperation, error) {
	return withPool(ctx, s, func(q querier) (host.RuntimeOperation, error) { return getOperation(ctx, q, ws, id) })
}

// RuntimeOperation reads an operation after locking its session, so a
// delivery takes its locks in the same order as the session's commands.
func (t *tx) RuntimeOperation(ctx context.Context, ws, id string) (host.RuntimeOperation, error) {
	if t.failed != nil {
		return host.RuntimeOperation{}, t.failed
	}
	var sid string
	err := t.tx.QueryRow(ctx, `SELECT session_id FROM runtime_operations WHERE workspace_id = $1 AND id = $2`, ws, id).Scan(&sid)
	if isNoRows(err) {
		return host.RuntimeOperation{}, dialect.NotFound("runtime operation " + id)
	}
	if err != nil {
		return host.RuntimeOperation{}, t.fail(classify("get runtime operation", err))
	}
	if err := t.lockSession(ctx, ws, sid, false); err != nil {
		return host.RuntimeOperation{}, err
	}
	op, err := getOperation(ctx, t.tx, ws, id)
	return op, t.result(err)
}

func (t *tx) InsertRuntimeOperation(ctx context.Context, op host.RuntimeOperation) error {
	if t.failed != nil {
		return t.failed
	}
	response, followUp, err := sqlstore.OperationArgs("pg", op)
	if err != nil {
		return err
	}
	tag, err := t.tx.Exec(ctx, `INSERT INTO runtime_operations (`+operationCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22)
		ON CONFLICT DO NOTHING`,
		op.WorkspaceID, op.ID, op.Kind, op.SessionID, op.TurnID, op.RequestID, response,
		op.RespondedBy, op.RespondedByName, string(op.State), op.Attempts, op.NextAttemptAt,
		op.LeaseReplica, op.LeaseEpoch, op.LeaseExpiresAt, string(op.Result), op.Reason,
		followUp, op.FollowUpTurnID, op.LastError, op.CreatedAt, op.UpdatedAt)
	if err != nil {
		return t.fail(classify("insert runtime operation", err))
	}
	if tag.RowsAffected() == 0 {
		return dialect.Duplicate("insert runtime operation " + op.ID)
	}
	return nil
}

// UpdateRuntimeOperation rewrites the mutable columns; the identity tuple,
// kind, response, responders and creation time stay as inserted.
func (t *tx) UpdateRuntimeOperation(ctx context.Context, op host.RuntimeOperation) error {
	if t.failed != nil {
		return t.failed
	}
	_, followUp, err := sqlstore.OperationArgs("pg", op)
	if err != nil {
		return err
	}
	tag, err := t.tx.Exec(ctx, `UPDATE runtime_operations SET state = $1, attempts = $2,
		next_attempt_at = $3, lease_replica = $4, lease_epoch = $5, lease_expires_at = $6, result = $7,
		reason = $8, followup_json = $9, followup_turn_id = $10, last_error = $11, updated_at = $12
		WHERE workspace_id = $13 AND id = $14`,
		string(op.State), op.Attempts, op.NextAttemptAt, op.LeaseReplica, op.LeaseEpoch,
		op.LeaseExpiresAt, string(op.Result), op.Reason, followUp, op.FollowUpTurnID,
		op.LastError, op.UpdatedAt, op.WorkspaceID, op.ID)
	return t.affectedOne("update runtime operation "+op.ID, tag, err)
}

// DueRuntimeOperations returns prepared operations whose next attempt is
// due and leased ones whose lease expired, in every workspace.
func (s *Store) DueRuntimeOperations(ctx context.Context, now time.Time, limit int) ([]host.RuntimeOperation, []host.Quarantined, error) {
	limit = host.ClampLimit(limit, 64, 1000)
	d, err := withPool(ctx, s, func(q querier) (sqlstore.Decoded[host.RuntimeOperation], error) {
		return queryRows(ctx, q, "due runtime operations", `SELECT `+operationCols+` FROM runtime_operations o
			WHERE ((o.state = 'prepared' AND o.next_attempt_at <= $1)
				OR (o.state = 'leased' AND o.lease_expires_at <= $1))
			AND NOT EXISTS (SELECT 1 FROM quarantine q
				WHERE q.kind = $2 AND q.key = o.workspace_id || '/' || o.id)
			ORDER BY o.next_attempt_at, o.workspace_id, o.id LIMIT $3`,
			[]any{now, QuarantineKindOperation, limit}, operationRecords)
	})
	return d.Records, d.Bad, err
}

// RequeueRuntimeOperations returns to prepared every leased operation of
// this replica's earlier processes and every expired lease.
func (s *Store) RequeueRuntimeOperations(ctx context.Context, replica string, now time.Time) (int, error) {
	return withPool(ctx, s, func(q querier) (int, error) {
		tag, err := q.Exec(ctx, `UPDATE runtime_operations SET state = 'prepared',
			next_attempt_at = $1, lease_replica = '', lease_epoch = '', lease_expires_at = NULL, updated_at = $1
			WHERE state = 'leased' AND (lease_replica = $2 OR lease_expires_at <= $1)`,
			now, replica)
		if err != nil {
			return 0, classify("requeue runtime operations", err)
		}
		return int(tag.RowsAffected()), nil
	})
}

// operationRecords collects due operations, an undecodable one as a
// quarantine candidate.
var operationRecords = sqlstore.Decodable(scanOperation, QuarantineKindOperation,
	func(op host.RuntimeOperation) (string, string) { return op.WorkspaceID, op.WorkspaceID + "/" + op.ID })
