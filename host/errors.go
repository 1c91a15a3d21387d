package host

import (
	"errors"
	"fmt"
)

// Code classifies a Host error. It is the domain's classification, not the
// wire: protocol.ErrorCode maps each onto the code clients see.
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

// Retryable reports whether a client may retry the same request unchanged.
func (c Code) Retryable() bool {
	switch c {
	case CodeSessionBusy, CodeRateLimited, CodeUnavailable, CodeOutcomeUnknown:
		return true
	}
	return false
}

// Error is the typed error every Host command returns. Reason is a stable,
// content-free detail (for example "execution_status_unknown").
type Error struct {
	Code    Code
	Message string
	Reason  string
	Err     error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf builds a typed error.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// wrap builds a typed error that keeps its cause for logs.
func wrap(code Code, err error, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Err: err}
}

// Reasons carried by unavailable errors, so a client (and an operator)
// can tell which dependency failed. docs/protocol.md lists them.
const (
	ReasonStoreUnavailable   = "store_unavailable"
	ReasonOwnerUnreachable   = "owner_unreachable"
	ReasonRuntimeUnavailable = "runtime_unavailable"
	ReasonCreateInProgress   = "create_in_progress"
	ReasonShuttingDown       = "shutting_down"
	ReasonTimeout            = "timeout"
)

// Store adapters return these sentinels (wrapped is fine); the Host maps them
// to typed errors.
var (
	// ErrNotFound: the row does not exist in that workspace.
	ErrNotFound = errors.New("not found")
	// ErrDuplicate: an insert hit a unique constraint.
	ErrDuplicate = errors.New("duplicate")
	// ErrUnavailable: the store could not be reached; the command may be retried.
	ErrUnavailable = errors.New("store unavailable")
	// ErrCorrupt: the row was read but does not decode into a valid
	// record. Retrying cannot help; the Host quarantines it and never
	// acts on it.
	ErrCorrupt = errors.New("stored record is corrupt")
)

// CodeOf classifies any error into the closed code list.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	var he *Error
	if errors.As(err, &he) {
		return he.Code
	}
	switch {
	case errors.Is(err, ErrNotFound):
		return CodeNotFound
	case errors.Is(err, ErrUnavailable):
		return CodeUnavailable
	case errors.Is(err, ErrDuplicate):
		return CodeOperationConflict
	}
	return CodeInternal
}

// ProviderError is an explicit rejection by the provider (agent). Runtimes
// return it so the Host can tell a provider-owned "no" from a local failure,
// whose delivery result is unknown.
type ProviderError struct {
	Code    string
	Message string
}

func (e *ProviderError) Error() string {
	return fmt.Sprintf("provider rejected: %s: %s", e.Code, e.Message)
}

// LocalError is a refusal by the runtime itself before anything was written
// to the provider (its session is busy, not started, …). The provider never
// saw the prompt, so the Turn goes back to queued and its claim stays
// retryable; it is never recorded as a provider rejection.
type LocalError struct {
	Code    string
	Message string
}

func (e *LocalError) Error() string {
	return fmt.Sprintf("runtime refused before sending: %s: %s", e.Code, e.Message)
}
