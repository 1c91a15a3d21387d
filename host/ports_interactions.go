package host

// Store and Tx methods for interactions and durable runtime operations.
//
// Store embeds InteractionStore and Tx embeds InteractionTx.
//
// Notes for store adapters (sqlite is the reference implementation; see
// sqlite/interactions.go and sqlite/migrations/00005_interactions.sql):
//
//   - An Interaction is keyed by (workspace, session, turn, request). Provider
//     request ids are only unique within their Turn. Insert returns
//     ErrDuplicate on that key. Options, Tool and Response round-trip as JSON;
//     Response.Payload is compact JSON (or nil).
//   - UpdateInteraction is a compare-and-set on the row's state: it writes
//     every mutable column only if the stored state equals `from`, returns
//     ErrNotFound when the row does not exist and ErrConflict when it exists in
//     another state. Identity columns, RootSessionID, Kind, Title, Prompt,
//     Options, Tool and CreatedAt are immutable after insert.
//   - TurnInteractions lists one Turn's interactions ordered by request id.
//   - InteractionTree is ONE read (one read transaction on SQL stores): the
//     root session's latest Turn (highest seq) as RootTurnID, and the
//     interactions of the latest Turn of the root and of every descendant
//     session (sessions whose root_id is the root, not deleted, not
//     provisional), ordered by (session id, turn id, request id). A session
//     whose latest Turn is retracted contributes nothing (and a retracted
//     root Turn gives RootTurnID ""). A root session that is missing,
//     deleted or provisional is ErrNotFound; a root without turns has
//     RootTurnID "" and no root interactions.
//   - SessionInteractions lists every interaction (any state) of one
//     session's Turns with fromSeq <= seq <= toSeq, ordered by (turn seq,
//     created at, request id): the durable history paged with its turns.
//   - LatestTurn returns the session's Turn with the highest seq (retracted
//     or not), or ErrNotFound.
//   - DeleteProvisionalSession also removes the session's interactions and
//     runtime operations.
//   - A RuntimeOperation is keyed by (workspace, id); the id is derived from
//     its identity tuple (see OperationIDFor), so inserting a second operation
//     for the same interaction is ErrDuplicate. UpdateRuntimeOperation writes
//     every mutable column (everything but workspace, id, kind, the identity
//     tuple, the response and CreatedAt) and returns ErrNotFound if absent.
//   - DueRuntimeOperations (all workspaces) returns operations that are
//     `prepared` with NextAttemptAt <= now, or `leased` with LeaseExpiresAt <=
//     now, oldest NextAttemptAt first, at most limit, skipping those in the
//     quarantine table under kind "runtime_operation" and key
//     "<workspace>/<id>". A row that cannot be decoded comes back as a
//     Quarantined candidate instead of failing the scan.
//   - RequeueRuntimeOperations (startup recovery) moves every `leased`
//     operation whose LeaseReplica equals replica, or whose lease expired at
//     now, back to `prepared` with NextAttemptAt = now and the lease cleared,
//     and returns how many it moved.

import (
	"context"
	"errors"
	"time"
)

// ErrConflict: a compare-and-set found the row in another state. The Host
// rereads and decides again; it is never shown to a client.
var ErrConflict = errors.New("conflict")

// InteractionStore is the read side of interactions and runtime
// operations; a Store implements it.
type InteractionStore interface {
	GetInteraction(ctx context.Context, ref InteractionRef) (Interaction, error)
	InteractionTree(ctx context.Context, ws, rootSessionID string) (InteractionTree, error)
	SessionInteractions(ctx context.Context, ws, sessionID string, fromSeq, toSeq int64) ([]Interaction, error)
	GetRuntimeOperation(ctx context.Context, ws, id string) (RuntimeOperation, error)
	DueRuntimeOperations(ctx context.Context, now time.Time, limit int) ([]RuntimeOperation, []Quarantined, error)
	RequeueRuntimeOperations(ctx context.Context, replica string, now time.Time) (int, error)
}

// InteractionTx is the write side, inside one Store.Update transaction; a
// Store's Tx implements it.
type InteractionTx interface {
	Interaction(ctx context.Context, ref InteractionRef) (Interaction, error)
	InsertInteraction(ctx context.Context, i Interaction) error
	UpdateInteraction(ctx context.Context, i Interaction, from InteractionState) error
	TurnInteractions(ctx context.Context, ws, sessionID, turnID string) ([]Interaction, error)
	// SettleAhead says that the Turn may settle later in this transaction:
	// a store may read what the settlement reads (TurnInteractions and the
	// queue reads after it) with its next round trip once it holds the
	// session's lock (called before the lock: with the lock's round trip),
	// and answer from that while nothing it read was written since. Doing
	// nothing is correct.
	SettleAhead(ctx context.Context, ws, sessionID, turnID string)
	LatestTurn(ctx context.Context, ws, sessionID string) (Turn, error)
	RuntimeOperation(ctx context.Context, ws, id string) (RuntimeOperation, error)
	InsertRuntimeOperation(ctx context.Context, op RuntimeOperation) error
	UpdateRuntimeOperation(ctx context.Context, op RuntimeOperation) error
}

// InteractionResponder (part of Runtime) is the narrow port that delivers a decided
// answer to the provider request waiting for it. runtime/acp implements it
// by answering the pending ACP session/request_permission call.
//
// RespondInteraction is idempotent per OperationID: a retried delivery never
// reaches the provider twice. An error means the delivery state is not known
// yet (the Host retries with backoff); a report is authoritative.
type InteractionResponder interface {
	RespondInteraction(ctx context.Context, d InteractionDelivery) (DeliveryReport, error)
}

// InteractionDelivery is one answer on its way to the provider.
type InteractionDelivery struct {
	Ref         InteractionRef
	OperationID string
	Kind        InteractionKind
	Title       string
	// Option is the chosen option as the agent offered it.
	Option  InteractionOption
	Payload []byte
	// AnsweredBy is the display name of the person who decided.
	AnsweredBy string
}

// DeliveryResult is the runtime's authoritative answer to a delivery.
type DeliveryResult string

const (
	// DeliveryDelivered: the provider request received the answer.
	DeliveryDelivered DeliveryResult = "delivered"
	// DeliverySuperseded: the provider request no longer exists (the turn
	// ended, was cancelled, or the agent process is gone); nobody can
	// answer it any more.
	DeliverySuperseded DeliveryResult = "superseded"
)

// DeliveryReport is what the runtime did with an answer. FollowUp is a
// provider-neutral prompt the runtime asks the Host to submit once the
// answered Turn is idle (after a denial the provider could not be told in
// full); the runtime never dispatches it itself.
type DeliveryReport struct {
	Result   DeliveryResult
	Reason   string
	FollowUp *MessageContent
}
