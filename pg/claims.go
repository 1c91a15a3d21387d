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

const claimCols = sqlcols.Claims

func scanClaim(row sqlstore.Scanner) (host.SubmitClaim, error) {
	var (
		c              host.SubmitClaim
		content, state string
	)
	err := row.Scan(&c.WorkspaceID, &c.ClientSubmitID, &c.SessionID, &c.TurnID, &c.Digest,
		&content, &state, &c.CreatedAt, &c.UpdatedAt)
	if err != nil {
		return host.SubmitClaim{}, err
	}
	c.State, c.CreatedAt, c.UpdatedAt = host.ClaimState(state), utc(c.CreatedAt), utc(c.UpdatedAt)
	if err := json.Unmarshal([]byte(content), &c.Content); err != nil {
		return host.SubmitClaim{}, fmt.Errorf("claim %s: decode content: %w", c.ClientSubmitID, err)
	}
	return c, nil
}

func getClaim(ctx context.Context, q querier, ws, clientSubmitID string) (host.SubmitClaim, error) {
	return sqlstore.One(dialect, q.QueryRow(ctx, `SELECT `+claimCols+` FROM submit_claims
		WHERE workspace_id = $1 AND client_submit_id = $2`, ws, clientSubmitID), scanClaim, "submit claim "+clientSubmitID, "get claim")
}

// GetClaim returns the submit claim for a ClientSubmitID in ws.
func (s *Store) GetClaim(ctx context.Context, ws, clientSubmitID string) (host.SubmitClaim, error) {
	return withPool(ctx, s, func(q querier) (host.SubmitClaim, error) {
		return getClaim(ctx, q, ws, clientSubmitID)
	})
}

func (t *tx) Claim(ctx context.Context, ws, clientSubmitID string) (host.SubmitClaim, error) {
	c, err := txRead(t, func() (host.SubmitClaim, error) { return getClaim(ctx, t.tx, ws, clientSubmitID) })
	if err == nil {
		t.see("submit_claims", ws, clientSubmitID, c.SessionID)
	}
	return c, err
}

// InsertClaim claims a ClientSubmitID. The primary key decides a race
// between replicas: the second claim waits for the first transaction and,
// once it commits, is reported as host.ErrDuplicate.
//
// It is not deferred (txconn.go): a duplicate is reported here, by this
// call, without aborting the transaction (as on SQLite), so a command may
// go on after it (TestDuplicateInsertKeepsTheTransaction).
func (t *tx) InsertClaim(ctx context.Context, c host.SubmitClaim) error {
	if t.failed != nil {
		return t.failed
	}
	args, err := claimArgs(c)
	if err != nil {
		return err
	}
	tag, err := t.tx.Exec(ctx, insertClaimSQL, args...)
	if err != nil {
		return t.fail(classify("insert claim", err))
	}
	if tag.RowsAffected() == 0 {
		return dialect.Duplicate("insert claim " + c.ClientSubmitID)
	}
	t.see("submit_claims", c.WorkspaceID, c.ClientSubmitID, c.SessionID)
	return nil
}

// AdmitClaim implements host.Tx: the insert goes with the next round trip
// (COMMIT's, for an admission) and a duplicate refuses the transaction on
// the server (ErrDuplicate from Update).
func (t *tx) AdmitClaim(ctx context.Context, c host.SubmitClaim) error {
	if t.failed != nil {
		return t.failed
	}
	args, err := claimArgs(c)
	if err != nil {
		return err
	}
	t.tx.queue(deferred{op: "insert claim " + c.ClientSubmitID, sql: admitClaimSQL, args: args})
	// As good as locked once inserted; if the insert fails, so does the
	// transaction.
	t.see("submit_claims", c.WorkspaceID, c.ClientSubmitID, c.SessionID)
	return nil
}

// claimArgs are a claim's columns in claimCols order.
func claimArgs(c host.SubmitClaim) ([]any, error) {
	content, err := json.Marshal(c.Content)
	if err != nil {
		return nil, fmt.Errorf("pg: insert claim %s: encode content: %w", c.ClientSubmitID, err)
	}
	return []any{c.WorkspaceID, c.ClientSubmitID, c.SessionID, c.TurnID, c.Digest, string(content),
		string(c.State), c.CreatedAt, c.UpdatedAt}, nil
}

const insertClaimSQL = `INSERT INTO submit_claims (` + claimCols + `)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
	ON CONFLICT DO NOTHING`

var admitClaimSQL = fenceRows(insertClaimSQL+` RETURNING 1`, codeFenceDuplicate)

// UpdateClaim moves a claim along its lifecycle. Digest, content and
// creation time are what make the ClientSubmitID idempotent, so they stay
// as first claimed.
func (t *tx) UpdateClaim(ctx context.Context, c host.SubmitClaim) error {
	if t.failed != nil {
		return t.failed
	}
	k := rowKey{"submit_claims", c.WorkspaceID, c.ClientSubmitID}
	// A deferred update records the claim under its (new) session.
	later := t.defersUpdate(k)
	err := t.updateOne(ctx, k, "update claim "+c.ClientSubmitID, `UPDATE submit_claims SET session_id = $1, turn_id = $2,
		state = $3, updated_at = $4
		WHERE workspace_id = $5 AND client_submit_id = $6`,
		c.SessionID, c.TurnID, string(c.State), c.UpdatedAt, c.WorkspaceID, c.ClientSubmitID)
	if later {
		t.see("submit_claims", c.WorkspaceID, c.ClientSubmitID, c.SessionID)
	}
	return err
}

// SetClaimState is not preceded by a read: it goes with the next round
// trip, COMMIT's included, as a fence (a missing claim refuses the
// transaction on the server: ErrNotFound).
func (t *tx) SetClaimState(ctx context.Context, ws, clientSubmitID string, state host.ClaimState, at time.Time) error {
	if t.failed != nil {
		return t.failed
	}
	t.tx.queue(deferred{op: "set claim state " + clientSubmitID, sql: setClaimStateSQL,
		args: []any{string(state), at, ws, clientSubmitID}})
	return nil
}

var setClaimStateSQL = fenceRows(`UPDATE submit_claims SET state = $1, updated_at = $2
	WHERE workspace_id = $3 AND client_submit_id = $4 RETURNING 1`, codeFenceNotFound)
