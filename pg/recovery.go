package pg

import (
	"context"
	"errors"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// QuarantineKindTurn is the Quarantined.Kind of a Turn; its key is
// "<workspace>/<session>/<turn>".
const QuarantineKindTurn = "turn"

// UnsettledTurns returns every unsettled Turn in every workspace except the
// quarantined ones. A row that cannot be decoded is returned as a
// quarantine candidate so one poisoned record never fails recovery.
func (s *Store) UnsettledTurns(ctx context.Context) ([]host.Turn, []host.Quarantined, error) {
	type result struct {
		turns []host.Turn
		bad   []host.Quarantined
	}
	r, err := withPool(ctx, s, func(db querier) (result, error) {
		rows, err := db.Query(ctx, `SELECT `+turnCols+` FROM turns t
			WHERE t.phase <> 'settled'
			AND NOT EXISTS (SELECT 1 FROM quarantine q
				WHERE q.kind = $1 AND q.key = t.workspace_id || '/' || t.session_id || '/' || t.id)
			ORDER BY t.workspace_id, t.session_id, t.seq`, QuarantineKindTurn)
		if err != nil {
			return result{}, classify("unsettled turns", err)
		}
		defer rows.Close()
		var out result
		now := time.Now().UTC()
		for rows.Next() {
			t, err := scanTurn(rows)
			var de *decodeError
			if errors.As(err, &de) {
				out.bad = append(out.bad, host.Quarantined{
					WorkspaceID: t.WorkspaceID,
					Kind:        QuarantineKindTurn,
					Key:         turnRef(t).Key(),
					Reason:      err.Error(),
					At:          now,
				})
				continue
			}
			if err != nil {
				return result{}, classify("unsettled turns", err)
			}
			out.turns = append(out.turns, t)
		}
		if err := rows.Err(); err != nil {
			return result{}, classify("unsettled turns", err)
		}
		return out, nil
	})
	return r.turns, r.bad, err
}

// Quarantine records q so later scans skip it. Repeating it is harmless:
// the latest reason and time win.
func (s *Store) Quarantine(ctx context.Context, q host.Quarantined) error {
	at := q.At
	if at.IsZero() {
		at = time.Now()
	}
	_, err := withPool(ctx, s, func(db querier) (struct{}, error) {
		_, err := db.Exec(ctx, `INSERT INTO quarantine (workspace_id, kind, key, reason, at)
			VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (kind, key) DO UPDATE SET
				workspace_id = excluded.workspace_id, reason = excluded.reason, at = excluded.at`,
			q.WorkspaceID, q.Kind, q.Key, q.Reason, at)
		return struct{}{}, classify("quarantine", err)
	})
	return err
}
