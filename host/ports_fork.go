package host

import (
	"context"
	"time"
)

// Ports for session fork (fork.go). Every store records forks (ForkTx is
// part of Tx, so a wrapper cannot drop it silently); Forker is part of
// Runtime, and an agent that cannot fork says so through ForkCapability.

// ForkMode is how far back a runtime can attest a fork.
type ForkMode string

const (
	// ForkNone: the agent cannot fork (ForkCapability's reason says why).
	ForkNone ForkMode = ""
	// ForkLatestTurn: the agent forks a whole provider session (ACP
	// session/fork), so only a fork through its latest settled turn, with
	// nothing after it, is attestable.
	ForkLatestTurn ForkMode = "latest_turn"
	// ForkAnyTurn: the agent forks through any of its turns (the sim
	// agent's extension).
	ForkAnyTurn ForkMode = "any_turn"
)

// Stable, content-free fork refusal reasons.
const (
	ReasonForkUnsupported      = "fork_not_supported"
	ReasonForkAgentUnknown     = "agent_capabilities_unknown"
	ReasonForkNotSettled       = "fork_point_not_settled"
	ReasonForkUnbound          = "fork_point_unbound"
	ReasonForkNotLatest        = "fork_point_not_latest"
	ReasonForkSubagent         = "fork_of_subagent_session"
	ReasonForkEvidence         = "fork_evidence_incomplete"
	ReasonForkDeliveryUnknown  = "fork_delivery_unknown"
	ReasonForkInProgress       = "fork_in_progress"
	ReasonForkProviderMismatch = "fork_provider_session_mismatch"
)

// Forker is the runtime capability of forking a provider session.
type Forker interface {
	// ForkCapability reports what the runtime can attest right now from
	// what it already observed (the agent's advertised capabilities); it
	// never dials, starts a process or prepares anything. reason is set
	// when mode is ForkNone.
	ForkCapability() (mode ForkMode, reason string)
	// Fork creates a new provider session holding the source provider
	// session's history through ThroughProviderTurnID. A refusal before
	// anything reached the agent is a *LocalError whose Code is a stable
	// reason; any other error leaves the outcome unknown.
	Fork(ctx context.Context, req ForkRequest) (ForkResult, error)
}

// ForkRequest asks the runtime for a provider fork.
type ForkRequest struct {
	WorkspaceID     string
	SourceSessionID string
	TargetSessionID string
	// ProviderSessionID is the fork point's provider session.
	ProviderSessionID     string
	ThroughProviderTurnID string
	// Latest: no turn follows the fork point in the canonical session.
	Latest bool
	// ProviderTurnIDs are every provider turn id of the frozen snapshot
	// in ProviderSessionID, oldest first; the result must map each.
	ProviderTurnIDs []string
	Settings        map[string]string
}

// ForkResult is the provider's acceptance evidence.
type ForkResult struct {
	ProviderSessionID string
	// TurnIDs maps each requested source provider turn id to its identity
	// in the new provider session.
	TurnIDs map[string]string
}

// ForkState is where a fork operation is.
type ForkState string

const (
	// ForkDispatching: the target is reserved and the provider may have
	// been asked; a crash here leaves the outcome unknown (never redone).
	ForkDispatching ForkState = "dispatching"
	ForkCommitted   ForkState = "committed"
	ForkFailed      ForkState = "failed"
)

// ForkOp is one durable fork operation and, once committed, the target
// session's immutable lineage.
type ForkOp struct {
	WorkspaceID     string
	ClientSubmitID  string
	SourceSessionID string
	SourceTurnID    string
	TargetSessionID string
	// LineageID is the family's first session; LineageSeq numbers the
	// family's titles (the first session is 1, its forks 2, 3, …).
	LineageID         string
	LineageSeq        int64
	BaseTitle         string
	State             ForkState
	Reason            string
	ProviderSessionID string
	CreatedBy         string
	CreatedAt         time.Time
	UpdatedAt         time.Time
}

// ForkTx is the transaction part that records forks and lineage.
type ForkTx interface {
	// ForkOp reads an operation by (workspace, clientSubmitId); ErrNotFound.
	ForkOp(ctx context.Context, ws, clientSubmitID string) (ForkOp, error)
	// InsertForkOp inserts an operation; ErrDuplicate when its
	// clientSubmitId, target or (lineage, seq) is taken.
	InsertForkOp(ctx context.Context, op ForkOp) error
	// UpdateForkOp writes state, reason and provider session; ErrNotFound.
	UpdateForkOp(ctx context.Context, op ForkOp) error
	// SessionLineage is the committed operation whose target is the
	// session; ErrNotFound for a session that is not a fork.
	SessionLineage(ctx context.Context, ws, sessionID string) (ForkOp, error)
	// MaxLineageSeq is the highest seq reserved in the lineage (0: none).
	MaxLineageSeq(ctx context.Context, ws, lineageID string) (int64, error)
}
