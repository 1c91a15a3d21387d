package protocol

import (
	"net/http"

	"github.com/ensemble-dev/ensemble/host"
)

// Code is one entry of the closed list of error codes every transport
// shows to clients. docs/protocol.md (## Errors) documents each.
type Code string

const (
	CodeUnauthenticated   Code = "unauthenticated"
	CodeForbidden         Code = "forbidden"
	CodeNotFound          Code = "not_found"
	CodeInvalidInput      Code = "invalid_input"
	CodeOperationConflict Code = "operation_conflict"
	CodeSessionBusy       Code = "session_busy"
	CodeNotDispatched     Code = "not_dispatched"
	CodeOutcomeUnknown    Code = "outcome_unknown"
	CodeUnsupported       Code = "unsupported"
	CodeRateLimited       Code = "rate_limited"
	CodeUnavailable       Code = "unavailable"
	CodeInternal          Code = "internal"
)

// Codes lists every code, in documentation order.
var Codes = []Code{
	CodeUnauthenticated, CodeForbidden, CodeNotFound, CodeInvalidInput,
	CodeOperationConflict, CodeSessionBusy, CodeNotDispatched, CodeOutcomeUnknown,
	CodeUnsupported, CodeRateLimited, CodeUnavailable, CodeInternal,
}

// hostCodes is the explicit mapping from the domain's error classes to
// the wire codes: a class the table misses is internal on the wire.
var hostCodes = map[host.Code]Code{
	host.CodeUnauthenticated:   CodeUnauthenticated,
	host.CodeForbidden:         CodeForbidden,
	host.CodeNotFound:          CodeNotFound,
	host.CodeInvalidInput:      CodeInvalidInput,
	host.CodeOperationConflict: CodeOperationConflict,
	host.CodeSessionBusy:       CodeSessionBusy,
	host.CodeNotDispatched:     CodeNotDispatched,
	host.CodeOutcomeUnknown:    CodeOutcomeUnknown,
	host.CodeUnsupported:       CodeUnsupported,
	host.CodeRateLimited:       CodeRateLimited,
	host.CodeUnavailable:       CodeUnavailable,
	host.CodeInternal:          CodeInternal,
}

// ErrorCode maps a domain error class onto its wire code.
func ErrorCode(c host.Code) Code {
	if w, ok := hostCodes[c]; ok {
		return w
	}
	return CodeInternal
}

// Retryable reports whether a client may retry the same request unchanged.
func (c Code) Retryable() bool {
	switch c {
	case CodeSessionBusy, CodeRateLimited, CodeUnavailable, CodeOutcomeUnknown:
		return true
	}
	return false
}

// HTTPStatus is the status an HTTP response carrying c has.
func (c Code) HTTPStatus() int {
	switch c {
	case CodeUnauthenticated:
		return http.StatusUnauthorized
	case CodeForbidden:
		return http.StatusForbidden
	case CodeNotFound:
		return http.StatusNotFound
	case CodeInvalidInput:
		return http.StatusBadRequest
	case CodeOperationConflict, CodeSessionBusy, CodeNotDispatched:
		return http.StatusConflict
	case CodeOutcomeUnknown:
		return http.StatusBadGateway
	case CodeUnsupported:
		return http.StatusNotImplemented
	case CodeRateLimited:
		return http.StatusTooManyRequests
	case CodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// Error is the error object of every failed response, WebSocket or HTTP.
type Error struct {
	Code      Code   `json:"code"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
	Reason    string `json:"reason,omitempty"`
	// RetryAfterMs is a back-off hint on some retryable errors: retry no
	// sooner than this.
	RetryAfterMs int64 `json:"retryAfterMs,omitempty"`
}

// HTTPError is the body of a failed HTTP response.
type HTTPError struct {
	Error Error `json:"error"`
}
