package host

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"time"
	"unicode/utf8"
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

// treeFact names the execution tree s belongs to: its immutable root and
// the root's latest Turn, read inside tx so it sees the tx's own writes.
func treeFact(ctx context.Context, tx Tx, s Session) (Fact, error) {
	root := rootOf(s)
	f := Fact{WorkspaceID: s.WorkspaceID, Kind: FactInteractionTreeDirty, SessionID: root}
	ix, err := itx(tx)
	if err != nil {
		return f, nil // no interactions kept: an all-turns wake is still right
	}
	t, err := ix.LatestTurn(ctx, s.WorkspaceID, root)
	switch {
	case err == nil:
		f.TurnID = t.ID
	case !errors.Is(err, ErrNotFound):
		return f, err
	}
	return f, nil
}

func rootOf(s Session) string {
	if s.RootID != "" {
		return s.RootID
	}
	return s.ID
}

// RespondInteraction answers one exact interaction. The winner is decided
// at the canonical transition pending → answered, in the same transaction
// that prepares the durable runtime operation delivering it. A competing
// response identical to the winner is answered too; a different one, or any
// response to a request that is no longer pending, is superseded. No
// responder ever sees a conflict or in-progress error for losing a race.
func (h *Host) RespondInteraction(ctx context.Context, in RespondInput) (RespondResult, error) {
	ref := in.Ref
	if err := requireIDs(ref.WorkspaceID, ref.SessionID, ref.TurnID, ref.RequestID); err != nil {
		return RespondResult{}, err
	}
	resp, err := normalizeResponse(in.Response)
	if err != nil {
		return RespondResult{}, err
	}
	if h.istore == nil {
		return RespondResult{}, errNoInteractions
	}
	var out RespondResult
	for attempt := 0; ; attempt++ {
		out = RespondResult{}
		prepared := false
		err = h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
			ix, err := itx(tx)
			if err != nil {
				return err
			}
			s, err := visibleSession(ctx, tx, ref.WorkspaceID, ref.SessionID)
			if err != nil {
				return err
			}
			it, err := ix.Interaction(ctx, ref)
			if err != nil {
				return err
			}
			if _, ok := it.option(resp.OptionID); !ok {
				return Errorf(CodeInvalidInput, "optionId %q is not one of the interaction's options", resp.OptionID)
			}
			switch it.State {
			case InteractionPending:
				t, err := tx.Turn(ctx, ref.WorkspaceID, ref.SessionID, ref.TurnID)
				if err != nil {
					return err
				}
				latest, err := ix.LatestTurn(ctx, ref.WorkspaceID, ref.SessionID)
				if err != nil {
					return err
				}
				now := h.nowUTC()
				if t.Settled() || latest.ID != t.ID {
					// An older turn's pending row is never actionable.
					it.State, it.Resolution, it.UpdatedAt = InteractionSuperseded, ResolutionTurnSettled, now
					if err := ix.UpdateInteraction(ctx, it, InteractionPending); err != nil {
						return err
					}
					f, err := treeFact(ctx, tx, s)
					if err != nil {
						return err
					}
					emit(f)
					out = RespondResult{Disposition: DispositionSuperseded, Interaction: it}
					return nil
				}
				opID := OperationIDFor(ref)
				it.State, it.Response, it.UpdatedAt = InteractionAnswered, &resp, now
				it.AnsweredBy, it.AnsweredByName, it.AnsweredAt = in.RespondedBy, in.RespondedByName, &now
				it.OperationID = opID
				if err := ix.UpdateInteraction(ctx, it, InteractionPending); err != nil {
					return err
				}
				op := RuntimeOperation{
					WorkspaceID: ref.WorkspaceID, ID: opID, Kind: OperationKindInteractionResponse,
					SessionID: ref.SessionID, TurnID: ref.TurnID, RequestID: ref.RequestID,
					Response: resp, RespondedBy: in.RespondedBy, RespondedByName: in.RespondedByName,
					State: OperationPrepared, NextAttemptAt: now, CreatedAt: now, UpdatedAt: now,
				}
				if err := ix.InsertRuntimeOperation(ctx, op); err != nil {
					return err
				}
				f, err := treeFact(ctx, tx, s)
				if err != nil {
					return err
				}
				emit(f)
				prepared = true
				out = RespondResult{Disposition: DispositionAnswered, Interaction: it}
			case InteractionAnswered:
				d := DispositionSuperseded
				if it.Response != nil && sameResponse(*it.Response, resp) {
					d = DispositionAnswered
				}
				out = RespondResult{Disposition: d, Interaction: it}
			default:
				out = RespondResult{Disposition: DispositionSuperseded, Interaction: it}
			}
			return nil
		})
		if (errors.Is(err, ErrConflict) || errors.Is(err, ErrDuplicate)) && attempt < respondRetries {
			continue // another responder moved the row first: decide again from it
		}
		if err != nil {
			return RespondResult{}, storeErr(err, "interaction %s", ref.RequestID)
		}
		if prepared {
			h.wakeOps()
		}
		return out, nil
	}
}

// normalizeResponse validates a response and compacts its payload so that
// identical responses compare equal byte for byte.
func normalizeResponse(r InteractionResponse) (InteractionResponse, error) {
	if err := requireIDs(r.OptionID); err != nil {
		return r, Errorf(CodeInvalidInput, "response.optionId is required (printable ASCII, at most %d bytes)", maxIDLen)
	}
	out := InteractionResponse{OptionID: r.OptionID}
	p := bytes.TrimSpace(r.Payload)
	if len(p) == 0 || bytes.Equal(p, []byte("null")) {
		return out, nil
	}
	if len(p) > maxPayloadBytes {
		return r, Errorf(CodeInvalidInput, "response.payload exceeds %d bytes", maxPayloadBytes)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, p); err != nil || !utf8.Valid(buf.Bytes()) {
		return r, Errorf(CodeInvalidInput, "response.payload must be valid JSON")
	}
	out.Payload = json.RawMessage(buf.Bytes())
	return out, nil
}

func sameResponse(a, b InteractionResponse) bool {
	if a.OptionID != b.OptionID {
		return false
	}
	return jsonEqual(a.Payload, b.Payload)
}

// jsonEqual compares two JSON values semantically (object key order does
// not matter); both empty is equal.
func jsonEqual(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

// GetInteraction reads one interaction by its complete identity.
func (h *Host) GetInteraction(ctx context.Context, ref InteractionRef) (Interaction, error) {
	if _, err := h.GetSession(ctx, ref.WorkspaceID, ref.SessionID); err != nil {
		return Interaction{}, err
	}
	if err := requireIDs(ref.TurnID, ref.RequestID); err != nil {
		return Interaction{}, err
	}
	if h.istore == nil {
		return Interaction{}, errNoInteractions
	}
	i, err := h.istore.GetInteraction(ctx, ref)
	if err != nil {
		return Interaction{}, storeErr(err, "interaction %s", ref.RequestID)
	}
	return i, nil
}

// GetSessionInteractionTreeSnapshot reads one execution tree in one read:
// the root session's latest Turn and the interactions of that Turn and of
// every descendant session's latest Turn. It accepts only a root session.
// Older turns' pending rows never appear, so they can never be actionable.
func (h *Host) GetSessionInteractionTreeSnapshot(ctx context.Context, ws, rootSessionID string) (InteractionTree, error) {
	s, err := h.GetSession(ctx, ws, rootSessionID)
	if err != nil {
		return InteractionTree{}, err
	}
	if s.ParentID != "" || rootOf(s) != s.ID {
		return InteractionTree{}, &Error{Code: CodeInvalidInput, Reason: "not_root_session",
			Message: "session " + rootSessionID + " is not the root of its tree; read the tree of " + rootOf(s)}
	}
	if h.istore == nil {
		return InteractionTree{}, errNoInteractions
	}
	tree, err := h.istore.InteractionTree(ctx, ws, rootSessionID)
	if err != nil {
		return InteractionTree{}, storeErr(err, "interaction tree %s", rootSessionID)
	}
	if tree.Interactions == nil {
		tree.Interactions = []Interaction{}
	}
	return tree, nil
}

// validateRequest checks a runtime's interaction report.
func validateRequest(req InteractionRequest) error {
	if err := requireIDs(req.RequestID); err != nil {
		return Errorf(CodeInternal, "interaction without a usable request id")
	}
	switch req.Kind {
	case InteractionApproval, InteractionQuestion, InteractionPlan:
	default:
		return Errorf(CodeInternal, "interaction kind %q", req.Kind)
	}
	if len(req.Options) == 0 || len(req.Options) > maxOptions {
		return Errorf(CodeInternal, "an interaction needs 1 to %d options", maxOptions)
	}
	seen := map[string]bool{}
	for _, o := range req.Options {
		if requireIDs(o.ID) != nil || seen[o.ID] {
			return Errorf(CodeInternal, "interaction option ids must be unique printable ids")
		}
		seen[o.ID] = true
	}
	if len(req.Title) > maxInteractText || len(req.Prompt) > maxInteractText {
		return Errorf(CodeInternal, "interaction text too long")
	}
	return nil
}

// Interaction makes an agent's request canonical and pending, after the
// output queued before it. Like output, it is refused before the Turn's
// acceptance barrier. A retried report of a recorded request is a no-op.
func (k *turnSink) Interaction(ctx context.Context, req InteractionRequest) error {
	if err := validateRequest(req); err != nil {
		return err
	}
	if err := k.flushFirst(ctx); err != nil {
		return err
	}
	return k.h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		ix, err := itx(tx)
		if err != nil {
			return err
		}
		t, s, err := k.load(ctx, tx, fenceAccepted)
		if err != nil {
			return err
		}
		now := k.h.nowUTC()
		it := Interaction{
			WorkspaceID: t.WorkspaceID, SessionID: t.SessionID, TurnID: t.ID, RequestID: req.RequestID,
			RootSessionID: rootOf(s), Kind: req.Kind, Title: req.Title, Prompt: req.Prompt,
			Options: append([]InteractionOption(nil), req.Options...), Tool: req.Tool,
			State: InteractionPending, CreatedAt: now, UpdatedAt: now,
		}
		// Read before inserting: on PostgreSQL a failed insert would abort
		// the transaction before the duplicate could be examined.
		prev, err := ix.Interaction(ctx, it.Ref())
		switch {
		case err == nil && prev.Kind == it.Kind && prev.Title == it.Title:
			return nil // a retried report of a request already recorded
		case err == nil:
			return wrap(CodeInternal, ErrDuplicate, "interaction %s reported twice with different content", req.RequestID)
		case !errors.Is(err, ErrNotFound):
			return err
		}
		if err := ix.InsertInteraction(ctx, it); err != nil {
			return err
		}
		f, err := treeFact(ctx, tx, s)
		if err != nil {
			return err
		}
		emit(f)
		return nil
	})
}

// Withdraw supersedes a pending request the provider stopped waiting for.
// An answered one is left to its runtime operation; a retry finds nothing
// pending and does nothing.
func (k *turnSink) Withdraw(ctx context.Context, requestID string) error {
	if err := k.flushFirst(ctx); err != nil {
		return err
	}
	ref := InteractionRef{WorkspaceID: k.ref.WorkspaceID, SessionID: k.ref.SessionID, TurnID: k.ref.TurnID, RequestID: requestID}
	err := k.h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		ix, err := itx(tx)
		if err != nil {
			return err
		}
		_, s, err := k.load(ctx, tx, fenceUnsettled)
		if err != nil {
			return err
		}
		it, err := ix.Interaction(ctx, ref)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if it.State != InteractionPending {
			return nil
		}
		it.State, it.Resolution, it.UpdatedAt = InteractionSuperseded, ResolutionWithdrawn, k.h.nowUTC()
		if err := ix.UpdateInteraction(ctx, it, InteractionPending); err != nil {
			return err
		}
		f, err := treeFact(ctx, tx, s)
		if err != nil {
			return err
		}
		emit(f)
		return nil
	})
	if errors.Is(err, errTurnSettled) {
		return nil // settling already ended the Turn's interactions
	}
	return err
}

// Subagent records a child session in this Turn's tree with one Turn that
// is accepted at once: the parent Turn crossed the barrier and the provider
// named the child's identity.
func (k *turnSink) Subagent(ctx context.Context, req SubagentRequest) (TurnRef, TurnSink, error) {
	if req.ProviderSessionID == "" || req.ProviderTurnID == "" {
		return TurnRef{}, nil, Errorf(CodeInternal, "sub-agent without a provider identity")
	}
	title := strings.TrimSpace(req.Title)
	if len(title) > maxSubagentTitle {
		title = title[:maxSubagentTitle]
	}
	for !utf8.ValidString(title) {
		title = title[:len(title)-1]
	}
	if err := k.flushFirst(ctx); err != nil {
		return TurnRef{}, nil, err
	}
	// The child's ids derive from the parent Turn and the provider's
	// session id, so a retry after an ambiguous commit finds the child
	// instead of creating a second one.
	ref := TurnRef{WorkspaceID: k.ref.WorkspaceID,
		SessionID: derivedID("ses", k.ref.TurnID, req.ProviderSessionID),
		TurnID:    derivedID("turn", k.ref.TurnID, req.ProviderSessionID)}
	// The child Turn is driven by this runtime from its first commit: the
	// reconciler must not take it for an orphan.
	k.h.work.drive(ref.TurnID)
	err := k.h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		t, ps, err := k.load(ctx, tx, fenceAccepted)
		if err != nil {
			return err
		}
		switch prev, err := tx.Session(ctx, ref.WorkspaceID, ref.SessionID); {
		case err == nil && prev.ParentID == ps.ID:
			return nil // recorded by an earlier try
		case err == nil:
			return wrap(CodeInternal, ErrDuplicate, "sub-agent session %s exists under another parent", ref.SessionID)
		case !errors.Is(err, ErrNotFound):
			return err
		}
		now := k.h.nowUTC()
		child := Session{
			WorkspaceID: ps.WorkspaceID, ID: ref.SessionID, ParentID: ps.ID, RootID: rootOf(ps),
			Title: title, TitleExplicit: title != "", Agent: ps.Agent, Simulated: ps.Simulated,
			ProviderSessionID: req.ProviderSessionID, TurnCount: 1, CreatedBy: ps.CreatedBy,
			CreatedAt: now, UpdatedAt: now,
		}
		ct := Turn{
			WorkspaceID: child.WorkspaceID, SessionID: child.ID, ID: ref.TurnID, Seq: 1,
			Origin: "subagent", Phase: PhaseDurablyAccepted, ProviderSessionID: req.ProviderSessionID,
			ProviderTurnID: req.ProviderTurnID, SubmittedBy: t.SubmittedBy, CreatedAt: now, UpdatedAt: now,
			TurnLabels: TurnLabels{SubmittedByName: t.SubmittedByName, Agent: t.Agent},
		}
		child.ActiveTurnID = ct.ID
		if err := tx.InsertSession(ctx, child); err != nil {
			return err
		}
		if err := tx.InsertTurn(ctx, ct); err != nil {
			return err
		}
		f, err := treeFact(ctx, tx, child)
		if err != nil {
			return err
		}
		emit(Fact{WorkspaceID: child.WorkspaceID, Kind: FactSessionChanged, SessionID: child.ID, TurnID: ct.ID}, f)
		return nil
	})
	if err != nil {
		k.h.work.release(ref.TurnID)
		return TurnRef{}, nil, err
	}
	return ref, newTurnSink(k.h, ref, true), nil
}

// derivedID is a stable id for what one parent identity names: prefix_
// and 128 bits of SHA-256 over the parts.
func derivedID(prefix string, parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return prefix + "_" + hex.EncodeToString(h.Sum(nil)[:16])
}

// endInteractions moves a settling or cancelled Turn's pending interactions
// to their end state inside tx. Answered ones are left to their runtime
// operation, whose authoritative result decides them.
func endInteractions(ctx context.Context, tx Tx, t Turn, state InteractionState, resolution string, now time.Time) error {
	ix, err := itx(tx)
	if err != nil {
		return nil // no interactions kept
	}
	its, err := ix.TurnInteractions(ctx, t.WorkspaceID, t.SessionID, t.ID)
	if err != nil {
		return err
	}
	for _, it := range its {
		if it.State != InteractionPending {
			continue
		}
		it.State, it.Resolution, it.UpdatedAt = state, resolution, now
		if err := ix.UpdateInteraction(ctx, it, InteractionPending); err != nil {
			return err
		}
	}
	return nil
}

// respondTimeout bounds one delivery attempt.
const respondTimeout = 15 * time.Second
