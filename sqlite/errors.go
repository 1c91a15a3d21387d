package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/ensemble-dev/ensemble/host"
)

// errNotProvisional refuses to hard-delete a session that became visible:
// compensation may only remove a shell whose creation never completed.
var errNotProvisional = errors.New("session is not provisional")

// classify maps driver errors onto the host sentinels so the Host can tell a
// conflict from a missing row from a store it cannot reach. The driver error
// stays in the chain for logs.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("sqlite: %s: %w", op, err)
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY, sqlite3.SQLITE_CONSTRAINT_UNIQUE:
			return fmt.Errorf("sqlite: %s: %w: %w", op, host.ErrDuplicate, err)
		}
		// Extended codes carry the primary code in the low byte.
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_CANTOPEN,
			sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL:
			return fmt.Errorf("sqlite: %s: %w: %w", op, host.ErrUnavailable, err)
		}
		return fmt.Errorf("sqlite: %s: %w", op, err)
	}
	if errors.Is(err, sql.ErrConnDone) || isClosedDB(err) {
		return fmt.Errorf("sqlite: %s: %w: %w", op, host.ErrUnavailable, err)
	}
	return fmt.Errorf("sqlite: %s: %w", op, err)
}

// isClosedDB recognises database/sql's unexported "database is closed" error,
// which a call racing Close can still see after the closed flag check.
func isClosedDB(err error) bool {
	return strings.Contains(err.Error(), "sql: database is closed")
}

// errClosed is returned by every call after Close.
var errClosed = fmt.Errorf("sqlite: store closed: %w", host.ErrUnavailable)
