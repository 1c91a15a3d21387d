package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/pressly/goose/v3"
)

// SQLite migrations used to be numbered on their own (00002_interactions,
// then every later file one below its PostgreSQL twin). They now carry pg's
// numbers and names. A database keeps which numbering its goose table uses
// in SQLite's header field user_version, which nothing else here uses:
//
//	0 (never set)  created before the renumbering: translate, then mark 2
//	1              created with the shared numbering
//	2              translated from the old numbering
const (
	numberingLegacy     = 0
	numberingShared     = 1
	numberingTranslated = 2
)

// legacyVersion maps an old SQLite migration number to the shared one.
func legacyVersion(v int64) int64 {
	switch {
	case v == 2: // interactions
		return 5
	case v >= 5: // output_appends (5) .. lineage (12) moved up by one
		return v + 1
	}
	return v // init (1), session_leases (3), outbox_prune (4) kept theirs
}

// sharedNumbering makes the goose table of db use the shared numbering
// before goose reads it, and reports whether it was translated: the old
// order applied interactions (now 5) before session_leases and
// outbox_prune (3, 4), so a database translated part-way may hold applied
// versions above pending ones and needs goose's out-of-order mode.
func sharedNumbering(ctx context.Context, db *sql.DB) (translated bool, err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, classify("migration numbering", err)
	}
	defer tx.Rollback()
	var numbering int
	if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&numbering); err != nil {
		return false, classify("migration numbering", err)
	}
	if numbering != numberingLegacy {
		return numbering == numberingTranslated, nil
	}
	var tables int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master
		WHERE type = 'table' AND name = ?`, goose.DefaultTablename).Scan(&tables); err != nil {
		return false, classify("migration numbering", err)
	}
	mark := numberingShared
	if tables > 0 {
		if err := translateLegacy(ctx, tx); err != nil {
			return false, err
		}
		mark = numberingTranslated
	}
	// PRAGMA takes no bind parameters; mark is one of the constants above.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, mark)); err != nil {
		return false, classify("migration numbering", err)
	}
	if err := tx.Commit(); err != nil {
		return false, classify("migration numbering", err)
	}
	return mark == numberingTranslated, nil
}

// translateLegacy rewrites the recorded versions in place and records the
// SQLite no-op 00002_outbox_claims as applied wherever init was, since
// everything it stands for on SQLite was there from the start.
func translateLegacy(ctx context.Context, tx *sql.Tx) error {
	rows, err := tx.QueryContext(ctx, `SELECT id, version_id FROM `+goose.DefaultTablename)
	if err != nil {
		return classify("translate migration numbering", err)
	}
	type rec struct{ id, version int64 }
	var recs []rec
	for rows.Next() {
		var r rec
		if err := rows.Scan(&r.id, &r.version); err != nil {
			rows.Close()
			return classify("translate migration numbering", err)
		}
		recs = append(recs, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return classify("translate migration numbering", err)
	}
	initApplied := false
	for _, r := range recs {
		initApplied = initApplied || r.version == 1
		if to := legacyVersion(r.version); to != r.version {
			if _, err := tx.ExecContext(ctx, `UPDATE `+goose.DefaultTablename+`
				SET version_id = ? WHERE id = ?`, to, r.id); err != nil {
				return classify("translate migration numbering", err)
			}
		}
	}
	if initApplied {
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+goose.DefaultTablename+`
			(version_id, is_applied) VALUES (2, 1)`); err != nil {
			return classify("translate migration numbering", err)
		}
	}
	return nil
}
