package pg

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/ensemble-dev/ensemble/internal/sqlstore"
)

// dialect is what the shared row codecs need from this store.
var dialect = sqlstore.Dialect{Name: "pg", NoRows: pgx.ErrNoRows, Classify: classify}

// queryRows runs a statement and reads its rows with collect (sqlstore.All,
// sqlstore.JSONRecords, sqlstore.Decodable); failures are classified as op.
func queryRows[R any](ctx context.Context, q querier, op, sql string, args []any, collect func(sqlstore.Rows) (R, error)) (R, error) {
	var out R
	rows, err := q.Query(ctx, sql, args...)
	if err == nil {
		out, err = collect(rows)
		rows.Close()
	}
	if err != nil {
		return *new(R), classify(op, err)
	}
	return out, nil
}
