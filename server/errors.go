package server

import (
	"context"
	"errors"
	"log/slog"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/protocol"
)

// toWire classifies err. Typed Host errors keep their message and reason;
// anything else gets a generic message so internals never leak (the cause
// is logged instead).
func toWire(err error, log *slog.Logger, op string) protocol.Error {
	var rl *retryLater
	if errors.As(err, &rl) {
		w := toWire(rl.err, log, op)
		w.RetryAfterMs = max(1, rl.after.Milliseconds())
		return w
	}
	var he *host.Error
	if errors.As(err, &he) {
		if he.Code == host.CodeInternal {
			log.Error("internal error", "op", op, "err", err)
		}
		code := protocol.ErrorCode(he.Code)
		return protocol.Error{Code: code, Message: he.Message, Retryable: code.Retryable(), Reason: he.Reason}
	}
	code := host.CodeOf(err)
	reason := ""
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		code, reason = host.CodeUnavailable, host.ReasonTimeout
	case errors.Is(err, host.ErrUnavailable):
		reason = host.ReasonStoreUnavailable
	}
	msg := "internal error"
	switch code {
	case host.CodeNotFound:
		msg = "not found"
	case host.CodeUnavailable:
		msg = "service unavailable; retry"
	case host.CodeOperationConflict:
		msg = "conflict"
	default:
		log.Error("internal error", "op", op, "err", err)
	}
	wc := protocol.ErrorCode(code)
	return protocol.Error{Code: wc, Message: msg, Retryable: wc.Retryable(), Reason: reason}
}

func errorf(code host.Code, format string, args ...any) error {
	return host.Errorf(code, format, args...)
}

// wire maps a Host result onto its protocol type; an error passes through
// with no result.
func wire[A, B any](f func(A) B) func(A, error) (any, error) {
	return func(v A, err error) (any, error) {
		if err != nil {
			return nil, err
		}
		return f(v), nil
	}
}
