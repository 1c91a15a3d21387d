package pg

import (
	"context"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/internal/sqlstore"
)

// QuarantineKindTurn is the Quarantined.Kind of a Turn; its key is
// "<workspace>/<session>/<turn>".
const QuarantineKindTurn = "turn"

// UnsettledTurns returns every unsettled Turn in every workspace except the
// quarantined ones. A row that cannot be decoded is returned as a
// quarantine candidate so one poisoned record never fails recovery.
func (s *Store) UnsettledTurns(ctx context.Context) ([]host.Turn, []host.Quarantined, error) {
	d, err := withPool(ctx, s, func(db querier) (sqlstore.Decoded[host.Turn], error) {
		return queryRows(ctx, db, "unsettled turns", `SELECT `+turnCols+` FROM turns t
			WHERE t.phase <> 'settled'
			AND NOT EXISTS (SELECT 1 FROM quarantine q
				WHERE q.kind = $1 AND q.key = t.workspace_id || '/' || t.session_id || '/' || t.id)
			ORDER BY t.workspace_id, t.session_id, t.seq`, []any{QuarantineKindTurn}, turnRecords)
	})
	return d.Records, d.Bad, err
}

// turnRecords collects turns, an undecodable one as a quarantine candidate.
var turnRecords = sqlstore.Decodable(scanTurn, QuarantineKindTurn,
	func(t host.Turn) (string, string) { return t.WorkspaceID, sqlstore.TurnRef(t).Key() })

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
