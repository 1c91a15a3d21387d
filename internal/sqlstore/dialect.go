package sqlstore

import (
	"errors"
	"fmt"

	"github.com/ensemble-dev/ensemble/host"
)

// Dialect is what the shared helpers need to know about a store's driver.
// SQL text, connections and transactions stay in the store.
type Dialect struct {
	// Name prefixes every error the store returns ("pg", "sqlite").
	Name string
	// NoRows is the driver's "query matched nothing" (pgx.ErrNoRows,
	// sql.ErrNoRows).
	NoRows error
	// Classify maps a driver error onto the host sentinels; the driver
	// error stays in the chain.
	Classify func(op string, err error) error
}

// Errors from both stores have one shape, "<store>: <what>: <sentinel>",
// so the Host matches host sentinels and logs name the store.

// NotFound is a missing record.
func (d Dialect) NotFound(what string) error {
	return fmt.Errorf("%s: %s: %w", d.Name, what, host.ErrNotFound)
}

// Duplicate is a record whose key is taken.
func (d Dialect) Duplicate(what string) error {
	return fmt.Errorf("%s: %s: %w", d.Name, what, host.ErrDuplicate)
}

// One decodes a single-row result with scan: no row is host.ErrNotFound
// naming what, any other failure is classified as op.
func One[T any](d Dialect, row Scanner, scan func(Scanner) (T, error), what, op string) (T, error) {
	v, err := scan(row)
	if errors.Is(err, d.NoRows) {
		var zero T
		return zero, d.NotFound(what)
	}
	if err != nil {
		var zero T
		return zero, d.Classify(op, err)
	}
	return v, nil
}

// All is a collector of every row, decoded with scan (see Collect).
func All[T any](scan func(Scanner) (T, error)) func(Rows) ([]T, error) {
	return func(rows Rows) ([]T, error) { return Collect(rows, scan) }
}
