package sqlite

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

func scanClaim(sc scanner) (host.SubmitClaim, error) {
	var (
		c                host.SubmitClaim
		content, state   string
		created, updated int64
	)
	err := sc.Scan(&c.WorkspaceID, &c.ClientSubmitID, &c.SessionID, &c.TurnID, &c.Digest,
		&content, &state, &created, &updated)
	if err != nil {
		return host.SubmitClaim{}, err
	}
	c.State, c.CreatedAt, c.UpdatedAt = host.ClaimState(state), fromMS(created), fromMS(updated)
	if err := json.Unmarshal([]byte(content), &c.Content); err != nil {
		return host.SubmitClaim{}, fmt.Errorf("claim %s: decode content: %w", c.ClientSubmitID, err)
	}
	return c, nil
}

func getClaim(ctx context.Context, q querier, ws, clientSubmitID string) (host.SubmitClaim, error) {
	return sqlstore.One(dialect, q.QueryRowContext(ctx, `SELECT `+claimCols+` FROM submit_claims
		WHERE workspace_id = ? AND client_submit_id = ?`, ws, clientSubmitID), scanClaim, "submit claim "+clientSubmitID, "get claim")
}

// GetClaim returns the submit claim for a ClientSubmitID in ws.
func (s *Store) GetClaim(ctx context.Context, ws, clientSubmitID string) (host.SubmitClaim, error) {
	r, err := s.reader()
	if err != nil {
		return host.SubmitClaim{}, err
	}
	return getClaim(ctx, r, ws, clientSubmitID)
}

func (t *tx) Claim(ctx context.Context, ws, clientSubmitID string) (host.SubmitClaim, error) {
	return getClaim(ctx, t.tx, ws, clientSubmitID)
}

// AdmitClaim implements host.Tx: SQLite reports the duplicate from the
// call, and the admission gives up on it.
func (t *tx) AdmitClaim(ctx context.Context, c host.SubmitClaim) error {
	return t.InsertClaim(ctx, c)
}

func (t *tx) InsertClaim(ctx context.Context, c host.SubmitClaim) error {
	content, err := json.Marshal(c.Content)
	if err != nil {
		return fmt.Errorf("sqlite: insert claim %s: encode content: %w", c.ClientSubmitID, err)
	}
	_, err = t.tx.ExecContext(ctx, `INSERT INTO submit_claims (`+claimCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		c.WorkspaceID, c.ClientSubmitID, c.SessionID, c.TurnID, c.Digest, string(content),
		string(c.State), ms(c.CreatedAt), ms(c.UpdatedAt))
	return classify("insert claim", err)
}

// UpdateClaim moves a claim along its lifecycle. Digest, content and
// creation time are what make the ClientSubmitID idempotent, so they stay
// as first claimed.
func (t *tx) UpdateClaim(ctx context.Context, c host.SubmitClaim) error {
	res, err := t.tx.ExecContext(ctx, `UPDATE submit_claims SET session_id = ?, turn_id = ?,
		state = ?, updated_at = ?
		WHERE workspace_id = ? AND client_submit_id = ?`,
		c.SessionID, c.TurnID, string(c.State), ms(c.UpdatedAt), c.WorkspaceID, c.ClientSubmitID)
	return affectedOne("update claim "+c.ClientSubmitID, res, err)
}

func (t *tx) SetClaimState(ctx context.Context, ws, clientSubmitID string, state host.ClaimState, at time.Time) error {
	res, err := t.tx.ExecContext(ctx, `UPDATE submit_claims SET state = ?, updated_at = ?
		WHERE workspace_id = ? AND client_submit_id = ?`, string(state), ms(at), ws, clientSubmitID)
	return affectedOne("set claim state "+clientSubmitID, res, err)
}
