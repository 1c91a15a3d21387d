package sqlite

import (
	"context"
	"database/sql"

	"github.com/ensemble-dev/ensemble/internal/sqlstore"
)

// dialect is what the shared row codecs need from this store.
var dialect = sqlstore.Dialect{Name: "sqlite", NoRows: sql.ErrNoRows, Classify: classify}

// queryRows runs a statement and reads its rows with collect (sqlstore.All,
// sqlstore.JSONRecords, sqlstore.Decodable); failures are classified as op.
func queryRows[R any](ctx context.Context, q querier, op, query string, args []any, collect func(sqlstore.Rows) (R, error)) (R, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return *new(R), classify(op, err)
	}
	defer rows.Close()
	out, err := collect(rows)
	if err != nil {
		return *new(R), classify(op, err)
	}
	return out, nil
}
