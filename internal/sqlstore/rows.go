package sqlstore

// Scanner is one result row: pgx.Row, pgx.Rows, *sql.Row and *sql.Rows all
// satisfy it, so one row codec serves both stores.
type Scanner interface {
	Scan(dest ...any) error
}

// Rows is a result being read: pgx.Rows and *sql.Rows both satisfy it.
// Closing stays with the caller, because the two Close methods differ.
type Rows interface {
	Scanner
	Next() bool
	Err() error
}

// Collect decodes every row with scan. It returns an empty, non-nil slice
// for no rows, so an empty page encodes as [] rather than null.
func Collect[T any](rows Rows, scan func(Scanner) (T, error)) ([]T, error) {
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
