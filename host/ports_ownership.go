package host

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Session ownership ports. A live session's runtime (its agent process) is
// owned by one replica, recorded as a lease with a fencing generation.
// LeaseStore is part of Store and LeaseTx part of Tx, so every store keeps
// leases and a wrapper that embeds Store cannot drop the fence unnoticed.
// The Host uses them in cluster mode only (Config.Cluster).

// ErrLeaseLost means the caller no longer holds the session's lease at the
// generation it presented: another replica took the session over.
var ErrLeaseLost = errors.New("session lease lost")

// SessionLease is who owns a session's runtime.
type SessionLease struct {
	WorkspaceID string
	SessionID   string
	// Owner is the owning Host's epoch (unique per process).
	Owner string
	// Generation increases every time the owner changes: the fencing token.
	Generation int64
	ExpiresAt  time.Time
	// Live reports that the lease had not expired when it was read,
	// judged on the store's clock.
	Live bool
	// TookOver is set by AcquireLease when it replaced another owner's
	// expired lease: that owner's unfinished work needs recovery.
	TookOver string
}

// LeaseStore keeps session leases. Expiry is judged on the store's clock so
// replicas' clocks need not agree.
type LeaseStore interface {
	// AcquireLease makes owner the session's owner for ttl unless another
	// owner holds a live lease, and returns the lease as it stands
	// afterwards (Owner says who holds it). Taking over from another owner
	// increments Generation and sets TookOver; renewing one's own lease
	// keeps the generation.
	AcquireLease(ctx context.Context, ws, sessionID, owner string, ttl time.Duration) (SessionLease, error)
	// RenewLease extends owner's lease at gen by ttl, or returns
	// ErrLeaseLost when the lease is no longer owner's at gen.
	RenewLease(ctx context.Context, ws, sessionID, owner string, gen int64, ttl time.Duration) error
	// ReleaseLease expires owner's lease at gen at once (graceful shutdown),
	// so another replica can take over without waiting. No-op otherwise.
	ReleaseLease(ctx context.Context, ws, sessionID, owner string, gen int64) error
	// GetLease reads a session's lease; ErrNotFound when none was taken.
	GetLease(ctx context.Context, ws, sessionID string) (SessionLease, error)
}

// LeaseTx is the fence inside a write transaction.
type LeaseTx interface {
	// CheckLease returns ErrLeaseLost unless owner holds the session's
	// lease at gen. Expiry alone does not fail it: an owner whose lease
	// lapsed but was not taken over is still the only writer. A store may
	// send the check with the transaction's next statement: the loss is
	// then returned by that call, or by Update, and nothing the
	// transaction wrote commits.
	CheckLease(ctx context.Context, ws, sessionID, owner string, gen int64) error
}

// Forwarder carries a command to the replica that owns the session (the
// Redis bus implements it). Requests and replies are opaque JSON.
type Forwarder interface {
	// Forward delivers req to the Host whose epoch is owner and returns its
	// reply. ErrNotDelivered means the owner never took the request (it is
	// gone or not serving): nothing happened. Any other error leaves the
	// outcome unknown.
	Forward(ctx context.Context, owner string, req ForwardRequest) (ForwardReply, error)
}

// ErrNotDelivered: a forwarded request was withdrawn before the owner took it.
var ErrNotDelivered = errors.New("forwarded request not delivered")

// ForwardRequest is one forwarded command: an operation name and its input.
type ForwardRequest struct {
	Op    string          `json:"op"`
	Input json.RawMessage `json:"input"`
}

// ForwardReply is the owner's answer: a result, or a typed error.
type ForwardReply struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *ForwardError   `json:"error,omitempty"`
}

// ForwardError carries a Host *Error across replicas.
type ForwardError struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	Reason  string `json:"reason,omitempty"`
}
