package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"time"
)

// InteractionKind says what the agent waits for.
type InteractionKind string

const (
	// InteractionApproval: permission to run a tool call.
	InteractionApproval InteractionKind = "approval"
	// InteractionQuestion: the agent asks the people to choose an answer.
	InteractionQuestion InteractionKind = "question"
	// InteractionPlan: the agent proposes a plan and asks whether to go on.
	InteractionPlan InteractionKind = "plan"
)

// InteractionState is the canonical lifecycle: pending → answered |
// superseded | canceled. Answered is the durable claim marker of the
// winning response; a runtime that reports the provider request gone moves
// it on to superseded.
type InteractionState string

const (
	InteractionPending    InteractionState = "pending"
	InteractionAnswered   InteractionState = "answered"
	InteractionSuperseded InteractionState = "superseded"
	InteractionCanceled   InteractionState = "canceled"
)

// Resolutions: why an interaction is no longer pending (stable, content-free).
const (
	ResolutionDelivered      = "delivered"       // the provider received the answer
	ResolutionProviderGone   = "provider_gone"   // the provider request no longer existed
	ResolutionTurnSettled    = "turn_settled"    // the turn ended before anyone answered
	ResolutionTurnCanceled   = "turn_canceled"   // the turn was cancelled; answered "cancelled"
	ResolutionWithdrawn      = "withdrawn"       // the agent stopped waiting
	ResolutionDeliveryFailed = "delivery_failed" // delivery kept failing and was given up
)

// InteractionRef is the complete identity of an interaction. Provider
// request ids are only unique within their Turn.
type InteractionRef struct {
	WorkspaceID string `json:"workspace"`
	SessionID   string `json:"sessionId"`
	TurnID      string `json:"turnId"`
	RequestID   string `json:"requestId"`
}

// InteractionOption is one answer the agent offers. Kind is the agent's
// hint (ACP: allow_once, allow_always, reject_once, reject_always).
// Its JSON tags are the stored encoding (the options column), not the client
// protocol: clients get protocol.InteractionOption.
type InteractionOption struct {
	ID   string `json:"optionId"`
	Name string `json:"name"`
	Kind string `json:"kind,omitempty"`
}

// Denial reports whether choosing the option declines the request.
func (o InteractionOption) Denial() bool { return strings.HasPrefix(o.Kind, "reject") }

// InteractionResponse is one responder's decision. Payload is optional
// JSON (for example {"message": "use the staging database instead"}); it
// carries no identity fields.
// Its JSON tags are the stored encoding (the response column), not the
// client protocol: clients get protocol.InteractionResponse.
type InteractionResponse struct {
	OptionID string          `json:"optionId"`
	Payload  json.RawMessage `json:"payload,omitempty"`
}

// Interaction is one agent request waiting for (or decided by) a person.
// Its JSON tags are the export encoding, not the client protocol: clients
// get protocol.Interaction.
type Interaction struct {
	WorkspaceID string `json:"workspace"`
	SessionID   string `json:"sessionId"`
	TurnID      string `json:"turnId"`
	RequestID   string `json:"requestId"`
	// RootSessionID is the immutable root of the session's execution tree.
	RootSessionID string              `json:"rootSessionId"`
	Kind          InteractionKind     `json:"kind"`
	Title         string              `json:"title"`
	Prompt        string              `json:"prompt,omitempty"`
	Options       []InteractionOption `json:"options"`
	Tool          *ToolCall           `json:"tool,omitempty"`
	State         InteractionState    `json:"state"`
	// Response is the winning response, set once answered.
	Response       *InteractionResponse `json:"response,omitempty"`
	AnsweredBy     string               `json:"answeredBy,omitempty"`
	AnsweredByName string               `json:"answeredByName,omitempty"`
	AnsweredAt     *time.Time           `json:"answeredAt,omitempty"`
	Resolution     string               `json:"resolution,omitempty"`
	OperationID    string               `json:"operationId,omitempty"`
	CreatedAt      time.Time            `json:"createdAt"`
	UpdatedAt      time.Time            `json:"updatedAt"`
}

// Ref is the interaction's identity.
func (i Interaction) Ref() InteractionRef {
	return InteractionRef{WorkspaceID: i.WorkspaceID, SessionID: i.SessionID, TurnID: i.TurnID, RequestID: i.RequestID}
}

func (i Interaction) option(id string) (InteractionOption, bool) {
	for _, o := range i.Options {
		if o.ID == id {
			return o, true
		}
	}
	return InteractionOption{}, false
}

// InteractionTree is the complete interaction state of one execution tree:
// the root session's latest Turn and every descendant session's
// latest-Turn interactions, read at one instant.
type InteractionTree struct {
	WorkspaceID   string        `json:"workspace"`
	RootSessionID string        `json:"rootSessionId"`
	RootTurnID    string        `json:"rootTurnId"`
	Interactions  []Interaction `json:"interactions"`
}

// Pending derives the actionable subset from the same read.
func (t InteractionTree) Pending() []Interaction {
	var out []Interaction
	for _, i := range t.Interactions {
		if i.State == InteractionPending {
			out = append(out, i)
		}
	}
	return out
}

// InteractionRequest is how a runtime reports a request (TurnSink.Interaction).
type InteractionRequest struct {
	RequestID string
	Kind      InteractionKind
	Title     string
	Prompt    string
	Options   []InteractionOption
	Tool      *ToolCall
}

// SubagentRequest is how a runtime reports a sub-agent (TurnSink.Subagent).
// ProviderTurnID identifies the sub-agent's work; it must be unique within
// ProviderSessionID.
type SubagentRequest struct {
	ProviderSessionID string
	ProviderTurnID    string
	Title             string
}

// InteractionDisposition is what one responder's call became.
type InteractionDisposition string

const (
	// DispositionAnswered: this response won, or is identical to the winner.
	DispositionAnswered InteractionDisposition = "answered"
	// DispositionSuperseded: another response won, or the request is gone.
	DispositionSuperseded InteractionDisposition = "superseded"
)

// RespondInput is one responder's answer to one exact interaction.
type RespondInput struct {
	Ref      InteractionRef
	Response InteractionResponse
	// RespondedBy is the principal's user id, RespondedByName its display name.
	RespondedBy     string
	RespondedByName string
}

// RespondResult tells the responder whether their answer is the canonical
// one, with the interaction as it now stands.
type RespondResult struct {
	Disposition InteractionDisposition
	Interaction Interaction
}

// Runtime operation lifecycle: prepared → leased → completed | failed.
type OperationState string

const (
	OperationPrepared  OperationState = "prepared"
	OperationLeased    OperationState = "leased"
	OperationCompleted OperationState = "completed"
	OperationFailed    OperationState = "failed"
)

// OperationKindInteractionResponse delivers an interaction's answer.
const OperationKindInteractionResponse = "interaction_response"

// RuntimeOperation is a durable unit of work for the runtime. Its id is
// derived from its identity tuple (OperationIDFor).
type RuntimeOperation struct {
	WorkspaceID string `json:"workspace"`
	ID          string `json:"id"`
	Kind        string `json:"kind"`
	SessionID   string `json:"sessionId"`
	TurnID      string `json:"turnId"`
	RequestID   string `json:"requestId"`
	// Response is what gets delivered; RespondedBy (user id) and
	// RespondedByName are who decided.
	Response        InteractionResponse `json:"response"`
	RespondedBy     string              `json:"respondedBy,omitempty"`
	RespondedByName string              `json:"respondedByName,omitempty"`
	State           OperationState      `json:"state"`
	Attempts        int                 `json:"attempts"`
	NextAttemptAt   time.Time           `json:"nextAttemptAt"`
	LeaseReplica    string              `json:"leaseReplica,omitempty"`
	LeaseEpoch      string              `json:"leaseEpoch,omitempty"`
	LeaseExpiresAt  *time.Time          `json:"leaseExpiresAt,omitempty"`
	// Result is the runtime's authoritative answer, checkpointed once.
	Result DeliveryResult `json:"result,omitempty"`
	Reason string         `json:"reason,omitempty"`
	// FollowUp is the checkpointed follow-up intent; FollowUpTurnID the
	// Turn it became.
	FollowUp       *MessageContent `json:"followUp,omitempty"`
	FollowUpTurnID string          `json:"followUpTurnId,omitempty"`
	LastError      string          `json:"lastError,omitempty"`
	CreatedAt      time.Time       `json:"createdAt"`
	UpdatedAt      time.Time       `json:"updatedAt"`
}

// InteractionRef is the operation's identity tuple.
func (op RuntimeOperation) InteractionRef() InteractionRef {
	return InteractionRef{WorkspaceID: op.WorkspaceID, SessionID: op.SessionID, TurnID: op.TurnID, RequestID: op.RequestID}
}

// OperationIDFor derives the durable operation id from the interaction's
// identity, so one interaction can never have two operations.
func OperationIDFor(ref InteractionRef) string {
	sum := sha256.Sum256([]byte(ref.WorkspaceID + "\x00" + ref.SessionID + "\x00" + ref.TurnID + "\x00" + ref.RequestID))
	return "iop_" + hex.EncodeToString(sum[:16])
}

// DenyFollowUpPrefix starts the ClientSubmitID of a follow-up prompt after
// an interactive denial: "interactive-deny:<operation-id>".
const DenyFollowUpPrefix = "interactive-deny:"

// FactInteractionTreeDirty wakes consumers to reread one execution tree. Its
// SessionID is the tree's immutable root session and TurnID that root's
// latest Turn ("" for a root without turns or a deleted root: all turns).
const FactInteractionTreeDirty = "interaction_tree/dirty"

const (
	maxPayloadBytes  = 16 << 10
	maxInteractText  = 16 << 10
	maxOptions       = 16
	respondRetries   = 4
	maxSubagentTitle = 200
)

// emitTree emits the fact that wakes the execution tree s belongs to: its
// immutable root and the root's latest Turn, read inside tx so it sees the
// tx's own writes.
func emitTree(ctx context.Context, tx Tx, emit func(...Fact), s Session) error {
	root := rootOf(s)
	f := Fact{WorkspaceID: s.WorkspaceID, Kind: FactInteractionTreeDirty, SessionID: root}
	t, err := tx.LatestTurn(ctx, s.WorkspaceID, root)
	switch {
	case err == nil:
		f.TurnID = t.ID
	case !errors.Is(err, ErrNotFound):
		return err
	}
	emit(f)
	return nil
}

// emitTreeAt is emitTree for a write that holds t, a Turn of s: when s is
// its own root and t has the last seq s handed out (TurnCount), t is the
// root's latest Turn and the read is not needed.
func emitTreeAt(ctx context.Context, tx Tx, emit func(...Fact), s Session, t Turn) error {
	if rootOf(s) == s.ID && t.SessionID == s.ID && t.ID != "" && t.Seq == s.TurnCount {
		emit(Fact{WorkspaceID: s.WorkspaceID, Kind: FactInteractionTreeDirty, SessionID: s.ID, TurnID: t.ID})
		return nil
	}
	return emitTree(ctx, tx, emit, s)
}

func rootOf(s Session) string {
	if s.RootID != "" {
		return s.RootID
	}
	return s.ID
}

// endInteractions moves a settling or cancelled Turn's pending interactions
// to their end state inside tx and reports how many it moved. Answered
// ones are left to their runtime operation, whose authoritative result
// decides them.
func endInteractions(ctx context.Context, tx Tx, t Turn, state InteractionState, resolution string, now time.Time) (int, error) {
	its, err := tx.TurnInteractions(ctx, t.WorkspaceID, t.SessionID, t.ID)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, it := range its {
		if it.State != InteractionPending {
			continue
		}
		it.State, it.Resolution, it.UpdatedAt = state, resolution, now
		if err := tx.UpdateInteraction(ctx, it, InteractionPending); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// respondTimeout bounds one delivery attempt.
const respondTimeout = 15 * time.Second
