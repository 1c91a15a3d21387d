package host

import (
	"context"
	"errors"
	"sync"
	"time"
)

// The session message queue (issue 12, seed 003 "message authority").
//
// One admission path: SendInput on an idle session starts one root Turn;
// on a busy session, with an explicit placement, it becomes a steering
// entry (current_turn: delivered into the running Turn when the agent
// pulls) or a follow-up (next_turn: runs as a later Turn). Unlike seed
// 003's in-memory queue, entries live in the store under the session, and
// every change bumps the session's queue revision in its own transaction
// (the stores enforce it), so every replica and every restart sees the
// same queue and a retry answers from it.
//
// The pull cut is a state change under the session lock: queued → pulled
// (steering, when the agent takes it) or queued → started (when a Turn is
// admitted from it). queue.retract is queued → retracted under the same
// lock, so exactly one of a retract and a pull wins.
//
// Terminal handoff: the transaction that settles a Turn also marks the
// entries it consumed done (or unknown), folds the waiting steering ahead
// of the next follow-up and admits the successor Turn, so the session is
// never idle in between and a late submit either queues or sees the
// successor.

// FactQueueChanged wakes queue watchers; Version is the queue revision.
const FactQueueChanged = "queue/changed"

// QueueSubmitPrefix starts the ClientSubmitIDs of Turns the queue admits
// (reserved: "ensemble:").
const QueueSubmitPrefix = "ensemble:queue:"

// Reasons of queue refusals.
const (
	ReasonSteeringUnsupported = "steering_unsupported"
	ReasonTurnStopping        = "turn_stopping"
	ReasonEntryPulled         = "entry_pulled"
	ReasonEntryStarted        = "entry_started"
	ReasonEntryRetracted      = "entry_retracted"
	ReasonEntryFinished       = "entry_finished"
)

// SteeringRuntime (part of Runtime) is how an agent takes user input into
// a running Turn (an ACP extension; ACP has no standard one).
type SteeringRuntime interface {
	// SupportsSteering reports whether the session's agent advertised
	// the capability.
	SupportsSteering(ws, sessionID string) bool
	// SteeringReady tells the agent running ref that steering waits; the
	// agent takes it at its next pull point through the Turn's sink
	// (SteeringSource). A lost notice only delays the entry: what was
	// never pulled runs at the terminal handoff.
	SteeringReady(ctx context.Context, ref TurnRef) error
}

// SteeringSource is part of TurnSink: PullSteering crosses the pull cut for the Turn's waiting steering and
// returns it, oldest first. Entries it returns are delivered; a retract
// can no longer remove them.
type SteeringSource interface {
	PullSteering(ctx context.Context) ([]SteeringMessage, error)
}

// SteeringMessage is one steering entry handed to the agent.
type SteeringMessage struct {
	EntryID string         `json:"entryId"`
	Author  string         `json:"author,omitempty"`
	Content MessageContent `json:"content"`
}

// RetractInput removes one waiting queue entry. Only its author may,
// unless Admin.
type RetractInput struct {
	WorkspaceID string
	SessionID   string
	EntryID     string
	By          string
	Admin       bool
}

// RetractResult is the retracted entry and the queue revision.
type RetractResult struct {
	Entry         QueueEntry
	QueueRevision int64
}

// InterruptInput stops the exact running Turn through the queue.
type InterruptInput struct {
	WorkspaceID string
	SessionID   string
	TurnID      string
	By, ByName  string
	Wait        time.Duration
}

// InterruptResult is the canonical terminal Turn: every interrupt of the
// same Turn (concurrent, retried, on any replica) answers the same one.
type InterruptResult struct {
	Turn Turn
}

// queueState is the in-process part: successor Turns to dispatch.
type queueState struct {
	mu sync.Mutex
	// handoff: settled turn id → successor admitted in its settlement
	// transaction (read once the commit returned).
	handoff map[string]TurnRef
	// successors feeds runSuccessors; when full, the reconciler dispatches.
	successors chan TurnRef
	// unproven: turns fail-stopped with a pull whose commit could not be
	// proven; what they pulled ends unknown (a restart settles them
	// unknown anyway).
	unproven map[string]bool
}

func (q *queueState) init() {
	q.handoff = map[string]TurnRef{}
	q.successors = make(chan TurnRef, 256)
	q.unproven = map[string]bool{}
}

func queueFact(ws, sessionID string, rev int64) Fact {
	return Fact{WorkspaceID: ws, Kind: FactQueueChanged, SessionID: sessionID, Version: rev}
}

// canSteer reports whether the session's agent takes steering into a
// running turn (a read-only Host has no agent).
func (h *Host) canSteer(ws, sessionID string) bool {
	return h.runtime != nil && h.runtime.SupportsSteering(ws, sessionID)
}

// enqueueIn admits in as a queue entry of busy session s inside tx: the
// claim (state queued: the entry is its proof) and the entry, which
// bumps the queue revision.
func (h *Host) enqueueIn(ctx context.Context, tx Tx, emit func(...Fact), s Session, in SendInput, content MessageContent) (QueueEntry, error) {
	disp := DispositionFollowup
	if in.Placement == PlacementCurrentTurn {
		q, err := tx.Queue(ctx, s.WorkspaceID, s.ID)
		if err != nil {
			return QueueEntry{}, err
		}
		can := h.canSteer(s.WorkspaceID, s.ID)
		switch {
		case q.FenceTurnID == s.ActiveTurnID && !in.AllowFollowup:
			return QueueEntry{}, &Error{Code: CodeNotDispatched, Reason: ReasonTurnStopping,
				Message: "the running turn is being interrupted; nothing was queued (allow a follow-up to run it next)"}
		case !can && !in.AllowFollowup:
			return QueueEntry{}, &Error{Code: CodeNotDispatched, Reason: ReasonSteeringUnsupported,
				Message: "this agent cannot take input into a running turn; nothing was queued (send it for the next turn instead)"}
		case q.FenceTurnID != s.ActiveTurnID && can:
			disp = DispositionSteering
		}
	}
	now := h.nowUTC()
	claim := SubmitClaim{
		WorkspaceID: s.WorkspaceID, ClientSubmitID: in.ClientSubmitID, SessionID: s.ID,
		Digest: content.Digest(), Content: content, State: ClaimQueued, CreatedAt: now, UpdatedAt: now,
	}
	// A duplicate fails the admission; SendInput answers from the claim.
	if err := tx.AdmitClaim(ctx, claim); err != nil {
		return QueueEntry{}, err
	}
	e := QueueEntry{
		WorkspaceID: s.WorkspaceID, SessionID: s.ID, ID: h.newID("qe"), Disposition: disp,
		State: QueueQueued, ClientSubmitID: in.ClientSubmitID, Author: in.SubmittedBy,
		AuthorName: in.SubmittedByName, Content: content, Digest: claim.Digest,
		CreatedAt: now, UpdatedAt: now,
	}
	if disp == DispositionSteering {
		e.TargetTurnID = s.ActiveTurnID
	}
	e, err := tx.InsertQueueEntry(ctx, e)
	if err != nil {
		return e, err
	}
	emit(queueFact(s.WorkspaceID, s.ID, e.Revision))
	return e, nil
}

// queued answers a submission that became a queue entry and, for
// steering, tells the agent.
func (h *Host) queued(ctx context.Context, e QueueEntry, replayed bool) (SendResult, error) {
	res := SendResult{Disposition: e.Disposition, Entry: &e, QueueRevision: e.AdmittedRevision, Replayed: replayed}
	if e.TurnID != "" {
		if t, err := h.store.GetTurn(ctx, e.WorkspaceID, e.SessionID, e.TurnID); err == nil {
			res.Turn = &t
		}
	}
	if !replayed && e.Disposition == DispositionSteering {
		if h.canSteer(e.WorkspaceID, e.SessionID) {
			ref := TurnRef{WorkspaceID: e.WorkspaceID, SessionID: e.SessionID, TurnID: e.TargetTurnID}
			if err := h.runtime.SteeringReady(context.WithoutCancel(ctx), ref); err != nil {
				h.log.Warn("steering notice not delivered; the entry runs at the turn's end if never pulled",
					"turn", ref.TurnID, "entry", e.ID, "err", err)
			}
		}
	}
	return res, nil
}

// replayQueued answers a retried ClientSubmitID whose claim is a queue
// admission from the entry: the same disposition, entry and admission
// revision, from any replica.
func (h *Host) replayQueued(ctx context.Context, c SubmitClaim, in SendInput, content MessageContent) (SendResult, error) {
	if c.SessionID != in.SessionID || c.Digest != content.Digest() {
		return SendResult{}, &Error{Code: CodeOperationConflict, Reason: "client_submit_id_reused",
			Message: "clientSubmitId was already used with different content or another session"}
	}
	e, err := h.store.GetQueueEntryBySubmit(ctx, c.WorkspaceID, c.ClientSubmitID)
	if errors.Is(err, ErrNotFound) {
		// The claim and the entry commit together; a claim without its
		// entry proves nothing.
		return SendResult{}, &Error{Code: CodeOutcomeUnknown, Reason: "entry_missing",
			Message: "the submission's queue entry cannot be found; its outcome cannot be proven"}
	}
	if err != nil {
		return SendResult{}, storeErr(err, "queue entry")
	}
	return h.queued(ctx, e, true)
}

// Queue returns a session's queue: revision, fence and waiting entries.
func (h *Host) Queue(ctx context.Context, ws, sessionID string) (Queue, error) {
	if _, err := h.GetSession(ctx, ws, sessionID); err != nil {
		return Queue{}, err
	}
	q, err := h.store.GetQueue(ctx, ws, sessionID)
	if err != nil {
		return Queue{}, storeErr(err, "queue")
	}
	if q.Entries == nil {
		q.Entries = []QueueEntry{}
	}
	q.Steering = h.canSteer(ws, sessionID)
	return q, nil
}

// RetractQueued removes a waiting entry. It is a compare-and-set under the
// session lock against the pull and the handoff: an entry past the cut is
// an operation_conflict whose reason says what happened to it.
func (h *Host) RetractQueued(ctx context.Context, in RetractInput) (RetractResult, error) {
	if err := requireIDs(in.WorkspaceID, in.SessionID, in.EntryID); err != nil {
		return RetractResult{}, err
	}
	var out RetractResult
	err := h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		if _, err := visibleSession(ctx, tx, in.WorkspaceID, in.SessionID); err != nil {
			return err
		}
		e, err := tx.QueueEntry(ctx, in.WorkspaceID, in.SessionID, in.EntryID)
		if err != nil {
			return err
		}
		if !in.Admin && e.Author != in.By {
			return &Error{Code: CodeForbidden, Reason: "not_author",
				Message: "only the entry's author or an admin can retract it"}
		}
		switch e.State {
		case QueueQueued:
		case QueueRetracted:
			if e.RetractedBy == in.By {
				out = RetractResult{Entry: e, QueueRevision: e.Revision}
				return nil // the same retract again: idempotent
			}
			return queueConflict(e, ReasonEntryRetracted, "the entry was already retracted")
		case QueuePulled:
			return queueConflict(e, ReasonEntryPulled, "the agent already took the entry into its running turn")
		case QueueStarted:
			return queueConflict(e, ReasonEntryStarted, "the entry already started as a turn")
		default:
			return queueConflict(e, ReasonEntryFinished, "the entry already ran")
		}
		e.State, e.RetractedBy, e.UpdatedAt = QueueRetracted, in.By, h.nowUTC()
		if e, err = tx.UpdateQueueEntry(ctx, e); err != nil {
			return err
		}
		emit(queueFact(e.WorkspaceID, e.SessionID, e.Revision))
		out = RetractResult{Entry: e, QueueRevision: e.Revision}
		return nil
	})
	if err != nil {
		return RetractResult{}, storeErr(err, "queue entry %s", in.EntryID)
	}
	return out, nil
}

func queueConflict(e QueueEntry, reason, msg string) error {
	if e.TurnID != "" {
		msg += " (turn " + e.TurnID + ")"
	}
	return &Error{Code: CodeOperationConflict, Reason: reason, Message: msg}
}

// entryMessage is the transcript message of a queue entry that reached
// turn turnID; putMessages gives it its version.
func entryMessage(s Session, turnID string, e QueueEntry, now time.Time) Message {
	return Message{
		WorkspaceID: s.WorkspaceID, SessionID: s.ID, ID: turnID + ".q." + e.ID, TurnID: turnID,
		Role: RoleUser, Kind: KindText, Content: e.Content, Author: e.Author, AuthorName: e.AuthorName, CreatedAt: e.CreatedAt, UpdatedAt: now,
	}
}

// InterruptTurn stops the exact running Turn through the queue: it
// commits the stop fence (no steering reaches the Turn afterwards; a
// current_turn submit after it is refused or becomes a follow-up), then
// cancels the Turn and waits for its canonical terminal. A Turn that does
// not settle within the wait is outcome_unknown; retrying answers it.
func (h *Host) InterruptTurn(ctx context.Context, in InterruptInput) (InterruptResult, error) {
	if err := requireIDs(in.WorkspaceID, in.SessionID, in.TurnID); err != nil {
		return InterruptResult{}, err
	}
	if in.Wait <= 0 || in.Wait > MaxCancelWait {
		in.Wait = MaxCancelWait
	}
	err := h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		s, err := visibleSession(ctx, tx, in.WorkspaceID, in.SessionID)
		if err != nil {
			return err
		}
		t, err := tx.Turn(ctx, in.WorkspaceID, in.SessionID, in.TurnID)
		if err != nil {
			return err
		}
		q, err := tx.Queue(ctx, in.WorkspaceID, in.SessionID)
		if err != nil {
			return err
		}
		if t.Settled() || s.ActiveTurnID != t.ID || q.FenceTurnID == t.ID {
			return nil // settled already, or fenced by an earlier interrupt
		}
		rev, err := tx.SetQueueFence(ctx, in.WorkspaceID, in.SessionID, t.ID)
		if err != nil {
			return err
		}
		emit(queueFact(in.WorkspaceID, in.SessionID, rev))
		return nil
	})
	if err != nil {
		return InterruptResult{}, storeErr(err, "turn %s", in.TurnID)
	}
	res, err := h.CancelTurn(ctx, CancelInput{WorkspaceID: in.WorkspaceID, SessionID: in.SessionID,
		TurnID: in.TurnID, Wait: in.Wait, By: in.By, ByName: in.ByName})
	if err != nil {
		return InterruptResult{}, err
	}
	if !res.Turn.Settled() {
		return InterruptResult{}, &Error{Code: CodeOutcomeUnknown, Reason: "not_settled",
			Message: "the stop is recorded but the turn has not ended yet; retry to get its terminal"}
	}
	return InterruptResult{Turn: res.Turn}, nil
}
