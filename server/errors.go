package server

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/ensemble-dev/ensemble/host"
)

// wireError is the error object of every failed response, WebSocket or
// HTTP. Code is from the closed list in host.Codes.
type wireError struct {
	Code      host.Code `json:"code"`
	Message   string    `json:"message"`
	Retryable bool      `json:"retryable"`
	Reason    string    `json:"reason,omitempty"`
	// RetryAfterMs is a back-off hint on some retryable errors: retry no
	// sooner than this.
	RetryAfterMs int64 `json:"retryAfterMs,omitempty"`
}

// toWire classifies err. Typed Host errors keep their message and reason;
// anything else gets a generic message so internals never leak (the cause
// is logged instead).
func toWire(err error, log *slog.Logger, op string) wireError {
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
		return wireError{Code: he.Code, Message: he.Message, Retryable: he.Code.Retryable(), Reason: he.Reason}
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
	return wireError{Code: code, Message: msg, Retryable: code.Retryable(), Reason: reason}
}

func errorf(code host.Code, format string, args ...any) error {
	return host.Errorf(code, format, args...)
}

// httpStatus maps a code to its HTTP status.
func httpStatus(c host.Code) int {
	switch c {
	case host.CodeUnauthenticated:
		return http.StatusUnauthorized
	case host.CodeForbidden:
		return http.StatusForbidden
	case host.CodeNotFound:
		return http.StatusNotFound
	case host.CodeInvalidInput:
		return http.StatusBadRequest
	case host.CodeOperationConflict, host.CodeSessionBusy, host.CodeNotDispatched:
		return http.StatusConflict
	case host.CodeOutcomeUnknown:
		return http.StatusBadGateway
	case host.CodeUnsupported:
		return http.StatusNotImplemented
	case host.CodeRateLimited:
		return http.StatusTooManyRequests
	case host.CodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
