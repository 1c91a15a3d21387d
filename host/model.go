package host

import (
	"encoding/json"
	"time"
)

// Session is one agent conversation in a workspace. Placement (workspace,
// parent, root) is immutable; tombstones are columns so restore is lossless.
// Its JSON tags are the forwarding encoding (a session.update or
// session.fork reply between replicas), not the client protocol: clients get
// protocol.Session.
type Session struct {
	WorkspaceID string `json:"workspace"`
	ID          string `json:"id"`
	ParentID    string `json:"parentId,omitempty"`
	RootID      string `json:"rootId"`
	Title       string `json:"title"`
	// TitleExplicit: a caller set the title; derived titles never replace it.
	TitleExplicit bool              `json:"titleExplicit"`
	Agent         string            `json:"agent"`
	Simulated     bool              `json:"simulated"`
	Settings      map[string]string `json:"settings,omitempty"`
	Pinned        bool              `json:"pinned"`
	// ProviderSessionID is the agent's own id for this conversation.
	ProviderSessionID string `json:"providerSessionId,omitempty"`
	// MessageVersion is the last version handed to a message of this session.
	MessageVersion int64 `json:"messageVersion"`
	// TurnCount is the last Turn.Seq handed out.
	TurnCount    int64  `json:"turnCount"`
	ActiveTurnID string `json:"activeTurnId,omitempty"`
	// ContextLost: the agent could not load this session's provider
	// session; nothing is sent until a member chooses to continue in a
	// fresh agent session (Host.ContinueFresh).
	ContextLost bool `json:"contextLost,omitempty"`
	// Provisional sessions (initial content not yet durable) are invisible.
	Provisional bool       `json:"-"`
	CreatedBy   string     `json:"createdBy,omitempty"`
	CreatedAt   time.Time  `json:"createdAt"`
	UpdatedAt   time.Time  `json:"updatedAt"`
	DeletedAt   *time.Time `json:"deletedAt,omitempty"`
	// Goal is the session's live goal as the session list shows it, read
	// with the session by the stores' session reads (list, get, changes);
	// nil when it has no active or paused goal. Never written.
	Goal *GoalSummary `json:"goal,omitempty"`
}

// TurnPhase is where a Turn is in its lifecycle. The first five are the
// provider acceptance barrier; settled is terminal and carries an outcome.
type TurnPhase string

const (
	PhaseQueued            TurnPhase = "queued"
	PhaseDispatched        TurnPhase = "dispatched"
	PhaseProviderObserved  TurnPhase = "provider_observed"
	PhaseResolvingIdentity TurnPhase = "resolving_identity"
	PhaseDurablyAccepted   TurnPhase = "durably_accepted"
	PhaseSettled           TurnPhase = "settled"
)

// phaseRank orders the pre-acceptance phases so reports never move a Turn back.
func phaseRank(p TurnPhase) int {
	switch p {
	case PhaseQueued:
		return 0
	case PhaseDispatched:
		return 1
	case PhaseProviderObserved:
		return 2
	case PhaseResolvingIdentity:
		return 3
	case PhaseDurablyAccepted:
		return 4
	case PhaseSettled:
		return 5
	}
	return -1
}

// Valid reports whether p is one of the known phases; stores use it to
// refuse a row they cannot decode.
func (p TurnPhase) Valid() bool { return phaseRank(p) >= 0 }

// TurnOutcome is the canonical result of a settled Turn.
type TurnOutcome string

const (
	OutcomeCompleted   TurnOutcome = "completed"
	OutcomeCanceled    TurnOutcome = "canceled"
	OutcomeFailed      TurnOutcome = "failed"
	OutcomeInterrupted TurnOutcome = "interrupted"
)

// Valid reports whether o is empty (unsettled) or a known outcome.
func (o TurnOutcome) Valid() bool {
	switch o {
	case "", OutcomeCompleted, OutcomeCanceled, OutcomeFailed, OutcomeInterrupted:
		return true
	}
	return false
}

// Failure reasons: stable, content-free.
const (
	ReasonExecutionStatusUnknown = "execution_status_unknown"
	ReasonProviderRejected       = "provider_rejected"
	ReasonProviderStateLost      = "provider_state_lost"
	ReasonDeliveryUnknown        = "delivery_unknown"
	ReasonProviderError          = "provider_error"
	ReasonMaxTokens              = "max_tokens"
	ReasonRefusal                = "refusal"
)

// StopServerShutdown is the stop reason of a Turn whose agent was stopped
// by a graceful server shutdown (SIGTERM): its outcome stays unknown
// (failed, execution_status_unknown), but it was a planned restart.
const StopServerShutdown = "server_shutdown"

// Turn is one user submission and the agent's work on it.
// Its JSON tags are the export and forwarding encoding, not the client
// protocol: clients get protocol.Turn.
type Turn struct {
	WorkspaceID string    `json:"workspace"`
	SessionID   string    `json:"sessionId"`
	ID          string    `json:"id"`
	Seq         int64     `json:"seq"`
	Origin      string    `json:"origin"`
	Phase       TurnPhase `json:"phase"`
	// Outcome and FailureReason are set only when Phase is settled.
	Outcome       TurnOutcome `json:"outcome,omitempty"`
	FailureReason string      `json:"failureReason,omitempty"`
	// StopReason is the provider's own stop reason, for display.
	StopReason string `json:"stopReason,omitempty"`
	// Provider identity, bound atomically with durably_accepted.
	ProviderSessionID string `json:"providerSessionId,omitempty"`
	ProviderTurnID    string `json:"providerTurnId,omitempty"`
	ClientSubmitID    string `json:"clientSubmitId,omitempty"`
	// IdentityAnchorTurnID is an immutable relation to another Turn.
	IdentityAnchorTurnID string `json:"identityAnchorTurnId,omitempty"`
	Retracted            bool   `json:"retracted,omitempty"`
	// AppliedSeq is the highest runtime output sequence (OutputEvent.Seq)
	// made canonical for this Turn.
	AppliedSeq int64 `json:"-"`
	// CancelRequested: a durable cancel intent exists for this Turn.
	CancelRequested bool   `json:"cancelRequested,omitempty"`
	SubmittedBy     string `json:"submittedBy,omitempty"`
	// TurnLabels: who and what the Turn is shown as, recorded when it happened.
	TurnLabels
	CreatedAt time.Time  `json:"createdAt"`
	UpdatedAt time.Time  `json:"updatedAt"`
	SettledAt *time.Time `json:"settledAt,omitempty"`
}

// TurnLabels are display facts recorded as they happen, so a label never
// depends on what the server runs today: the author's display name at
// admission, who asked to stop it, and the agent that ran it.
// Its JSON tags are the stored encoding (the turn labels column), not the
// client protocol: clients get protocol.TurnLabels.
type TurnLabels struct {
	SubmittedByName string `json:"submittedByName,omitempty"`
	CanceledBy      string `json:"canceledBy,omitempty"`
	CanceledByName  string `json:"canceledByName,omitempty"`
	// CancelReason is the Host's stop reason when the Host itself asked
	// to stop the Turn (CancelInput.Reason).
	CancelReason string     `json:"cancelReason,omitempty"`
	Agent        *AgentInfo `json:"agent,omitempty"`
	// Goal is the provenance of a goal turn (goal_model.go), immutable.
	Goal *GoalProvenance `json:"goal,omitempty"`
}

// Settled reports whether the Turn reached a terminal state.
func (t Turn) Settled() bool { return t.Phase == PhaseSettled }

// Succeeds reports whether t may replace old, a state of the same Turn
// published before it: not when t is older by the Host's millisecond clock,
// and never an unsettled state over a settled one (settled is terminal).
// Two commits within one millisecond tie on the clock, and the older can
// be published last: the relay publishes what a crash between commit and
// publish left unpublished.
func (t Turn) Succeeds(old Turn) bool {
	if t.UpdatedAt.Before(old.UpdatedAt) {
		return false
	}
	return t.Settled() || !old.Settled()
}

// Succeeds reports whether s may replace old, a state of the same session
// published before it: not when s is older by the Host's millisecond
// clock, nor, within the same millisecond, when its transcript or its Turn
// count is behind old's (both only grow while the session lives), for the
// reason Turn.Succeeds gives.
func (s Session) Succeeds(old Session) bool {
	if s.UpdatedAt.Before(old.UpdatedAt) {
		return false
	}
	sameMoment := s.UpdatedAt.Equal(old.UpdatedAt) && s.CreatedAt.Equal(old.CreatedAt)
	return !sameMoment || s.MessageVersion >= old.MessageVersion && s.TurnCount >= old.TurnCount
}

// Accepted reports whether the provider identity is durably bound.
func (t Turn) Accepted() bool {
	return t.Phase == PhaseDurablyAccepted || (t.Phase == PhaseSettled && t.ProviderTurnID != "")
}

// Role of a message's author.
type Role string

const (
	RoleUser   Role = "user"
	RoleAgent  Role = "agent"
	RoleSystem Role = "system"
)

// MessageKind says how to show a message.
type MessageKind string

const (
	KindText     MessageKind = "text"
	KindThought  MessageKind = "thought"
	KindToolCall MessageKind = "tool_call"
	KindNotice   MessageKind = "notice"
)

// Message is one transcript entry. Version is the session-wide version of
// its last change (the sync cursor); Ordinal is the version at creation
// (the display order).
// Its JSON tags are the export and outbox-delta encoding, not the client
// protocol: clients get protocol.Message.
type Message struct {
	WorkspaceID string         `json:"workspace"`
	SessionID   string         `json:"sessionId"`
	ID          string         `json:"id"`
	TurnID      string         `json:"turnId"`
	Role        Role           `json:"role"`
	Kind        MessageKind    `json:"kind"`
	Version     int64          `json:"version"`
	Ordinal     int64          `json:"ordinal"`
	Content     MessageContent `json:"content"`
	Tool        *ToolCall      `json:"tool,omitempty"`
	// Streaming is true while the agent may still append to it.
	Streaming bool   `json:"streaming"`
	Author    string `json:"author,omitempty"`
	// AuthorName is the author's display name at admission.
	AuthorName string    `json:"authorName,omitempty"`
	CreatedAt  time.Time `json:"createdAt"`
	UpdatedAt  time.Time `json:"updatedAt"`
}

// ToolCall is the latest known state of one agent tool call.
// Its JSON tags are the stored encoding (tool columns), not the client
// protocol: clients get protocol.ToolCall.
type ToolCall struct {
	ID     string          `json:"id"`
	Title  string          `json:"title,omitempty"`
	Kind   string          `json:"kind,omitempty"`
	Status string          `json:"status,omitempty"`
	Input  json.RawMessage `json:"input,omitempty"`
	Output string          `json:"output,omitempty"`
	// Diffs are the file edits the tool proposes or made, so people can
	// see what they approve (ACP diff content).
	Diffs []ToolDiff `json:"diffs,omitempty"`
}

// ToolDiff is one file edit: OldText is absent for a new file.
// Its JSON tags are the stored encoding (inside ToolCall), not the client
// protocol: clients get protocol.ToolDiff.
type ToolDiff struct {
	Path    string  `json:"path"`
	OldText *string `json:"oldText,omitempty"`
	NewText string  `json:"newText"`
}

// ClaimState is the durable submit-claim lifecycle.
type ClaimState string

const (
	ClaimPrepared ClaimState = "prepared"
	ClaimAccepted ClaimState = "accepted"
	ClaimRejected ClaimState = "rejected"
	// ClaimQueued: the id admitted a queue entry (steering or follow-up);
	// the entry, found by the same id, is the durable proof (queue.go).
	ClaimQueued ClaimState = "queued"
)

// SubmitClaim makes one ClientSubmitID idempotent: keyed by
// (workspace, clientSubmitId), created before any provider dispatch. Its
// CreatedAt is the canonical occurrence of the user message.
type SubmitClaim struct {
	WorkspaceID    string         `json:"workspace"`
	ClientSubmitID string         `json:"clientSubmitId"`
	SessionID      string         `json:"sessionId"`
	TurnID         string         `json:"turnId"`
	Digest         string         `json:"digest"`
	Content        MessageContent `json:"content"`
	State          ClaimState     `json:"state"`
	CreatedAt      time.Time      `json:"createdAt"`
	UpdatedAt      time.Time      `json:"updatedAt"`
}

// Fact is a committed change published after its transaction. Untyped kinds
// are wake-up hints (consumers reread canonical state); a
// FactTranscriptAppended fact carries the committed TranscriptDelta itself
// (delta.go), and a Turn's lifecycle fact the Turn as committed (written.go).
// Version is the session message version at commit, so duplicates and
// reorderings are harmless.
type Fact struct {
	WorkspaceID string           `json:"workspace"`
	Kind        string           `json:"kind"`
	SessionID   string           `json:"sessionId,omitempty"`
	TurnID      string           `json:"turnId,omitempty"`
	Version     int64            `json:"version,omitempty"`
	Delta       *TranscriptDelta `json:"delta,omitempty"`
	// Goal is the committed goal state of a FactGoalState fact.
	Goal *GoalState `json:"goal,omitempty"`
	// Trash is what a FactTrashChanged fact changed in the workspace's Trash.
	Trash *TrashChange `json:"trash,omitempty"`
	// Turn is the Turn TurnID as its transaction wrote it, on a
	// FactSessionChanged fact the Turn's lifecycle emitted; Session is the
	// session as the same transaction wrote it, nil when it did not. A
	// consumer may apply them instead of rereading (written.go).
	Turn    *Turn    `json:"turn,omitempty"`
	Session *Session `json:"session,omitempty"`

	// typed asks commit to attach Turn and Session (turnFact).
	typed bool
}

// Fact kinds.
const (
	FactSessionChanged     = "session/changed"
	FactTranscriptAdvanced = "transcript/advanced"
	// FactResync is a workspace-wide resync (a fact with no SessionID): a
	// bus sends it when it may have lost facts, and every watcher rereads.
	FactResync = "bus/resync"
)

// Quarantined is a record recovery could not process; it is set aside and
// reported instead of failing recovery for everything else.
type Quarantined struct {
	WorkspaceID string    `json:"workspace"`
	Kind        string    `json:"kind"`
	Key         string    `json:"key"`
	Reason      string    `json:"reason"`
	At          time.Time `json:"at"`
}
