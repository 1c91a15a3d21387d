package pg

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ensemble-dev/ensemble/host"
)

// errNotProvisional refuses to hard-delete a session that became visible:
// compensation may only remove a shell whose creation never completed.
var errNotProvisional = errors.New("session is not provisional")

// SQLSTATE codes the store reacts to
// (https://www.postgresql.org/docs/current/errcodes-appendix.html).
const (
	codeUniqueViolation     = "23505"
	codeSerialization       = "40001"
	codeDeadlock            = "40P01"
	codeLockNotAvailable    = "55P03"
	codeAdminShutdown       = "57P01"
	codeCrashShutdown       = "57P02"
	codeCannotConnectNow    = "57P03"
	codeIdleInTxTimeout     = "25P03"
	codeCharNotInRepertoire = "22021"
	codeUntranslatable      = "22P05"
	// Raised by ensemble_fence (migration 00018): the lease is not this
	// owner's, a row is not as the transaction expected it, or a row it
	// inserts exists already.
	codeFenceLease     = "ENL01"
	codeFenceNotFound  = "ENN01"
	codeFenceDuplicate = "END01"
)

// fenceSQL wraps a check as a statement that fails the transaction on
// the server when the check is false, raising state (one of the
// codeFence… codes): such a fence needs no round trip of its own and may
// go in COMMIT's batch.
func fenceSQL(check, state string) string {
	return "SELECT ensemble_fence(" + check + ", '" + state + "')"
}

// fenceRows is fenceSQL for the commonest check: query (a read that locks,
// or a write with RETURNING) yields a row.
func fenceRows(query, state string) string {
	return "WITH f AS (" + query + ") " + fenceSQL("EXISTS (SELECT 1 FROM f)", state)
}

// classify maps driver errors onto the host sentinels so the Host can tell
// a conflict from a missing row from a database it cannot reach: unique
// violations are host.ErrDuplicate; lost connections, server shutdown,
// lock timeouts, deadlocks and serialization failures are
// host.ErrUnavailable (the command may be retried). The driver error stays
// in the chain for logs.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == codeUniqueViolation:
			return fmt.Errorf("pg: %s: %w: %w", op, host.ErrDuplicate, err)
		case pe.Code == codeFenceLease:
			return fmt.Errorf("pg: %s: %w", op, host.ErrLeaseLost)
		case pe.Code == codeFenceNotFound:
			return fmt.Errorf("pg: %s: %w", op, host.ErrNotFound)
		case pe.Code == codeFenceDuplicate:
			return fmt.Errorf("pg: %s: %w", op, host.ErrDuplicate)
		case retryableState(pe.Code):
			return fmt.Errorf("pg: %s: %w: %w", op, host.ErrUnavailable, err)
		case pe.Code == codeCharNotInRepertoire || pe.Code == codeUntranslatable:
			// PostgreSQL text cannot hold NUL characters.
			return &host.Error{Code: host.CodeInvalidInput, Err: err,
				Message: "text must not contain NUL characters"}
		}
		return fmt.Errorf("pg: %s: %w", op, err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("pg: %s: %w", op, err)
	}
	if isConnLoss(err) {
		return fmt.Errorf("pg: %s: %w: %w", op, host.ErrUnavailable, err)
	}
	return fmt.Errorf("pg: %s: %w", op, err)
}

// retryableState reports server errors after which the same command may
// succeed: the server is going away or not there yet, resources ran out,
// or a concurrency conflict aborted the transaction.
func retryableState(code string) bool {
	switch code {
	case codeSerialization, codeDeadlock, codeLockNotAvailable, codeAdminShutdown,
		codeCrashShutdown, codeCannotConnectNow, codeIdleInTxTimeout:
		return true
	}
	// Class 08: connection exception; class 53: insufficient resources
	// (too many connections, out of memory or disk).
	return strings.HasPrefix(code, "08") || strings.HasPrefix(code, "53")
}

// isConnLoss reports whether err means the connection (or every
// connection) is gone, as opposed to a statement failing on a live one.
func isConnLoss(err error) bool {
	if err == nil {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case codeAdminShutdown, codeCrashShutdown, codeCannotConnectNow, codeIdleInTxTimeout:
			return true
		}
		return strings.HasPrefix(pe.Code, "08")
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || isClosedPool(err)
}

// isClosedPool recognises puddle's "closed pool" error, which a call racing
// Close can still see after the closed flag check.
func isClosedPool(err error) bool { return strings.Contains(err.Error(), "closed pool") }

func isNotFound(err error) bool { return errors.Is(err, host.ErrNotFound) }

// isNoRows reports a query that matched nothing.
func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }

var dsnPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// redactPassword hides password in a URL or keyword/value connection string.
func redactPassword(s, password string) string {
	if u, err := url.Parse(s); err == nil && u.Scheme != "" {
		q := u.Query()
		if q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.Redacted()
	}
	s = dsnPassword.ReplaceAllString(s, "${1}xxxxx")
	return strings.ReplaceAll(s, password, "xxxxx")
}
