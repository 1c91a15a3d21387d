package host

import (
	"context"
	"errors"
	"strings"
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

func (h *Host) steering(ws, sessionID string) (SteeringRuntime, bool) {
	sr := h.runtime
	return sr, sr != nil && sr.SupportsSteering(ws, sessionID)
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
		_, can := h.steering(s.WorkspaceID, s.ID)
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
	if err := tx.InsertClaim(ctx, claim); err != nil {
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
		if sr, ok := h.steering(e.WorkspaceID, e.SessionID); ok {
			ref := TurnRef{WorkspaceID: e.WorkspaceID, SessionID: e.SessionID, TurnID: e.TargetTurnID}
			if err := sr.SteeringReady(context.WithoutCancel(ctx), ref); err != nil {
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
	_, q.Steering = h.steering(ws, sessionID)
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

// pullSteering crosses the pull cut for ref's waiting steering: under the
// session lock, entries admitted for this Turn move queued → pulled, each
// with its user message in the transcript. Nothing is pulled into a Turn
// that is no longer the active one or that an interrupt fenced.
func (h *Host) pullSteering(ctx context.Context, ref TurnRef) ([]SteeringMessage, error) {
	var pulled []QueueEntry
	err := h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		pulled = pulled[:0]
		if err := h.checkOwner(ctx, tx, ref.WorkspaceID, ref.SessionID); err != nil {
			return err
		}
		s, err := tx.Session(ctx, ref.WorkspaceID, ref.SessionID)
		if err != nil {
			return err
		}
		t, err := tx.Turn(ctx, ref.WorkspaceID, ref.SessionID, ref.TurnID)
		if err != nil {
			return err
		}
		if s.ActiveTurnID != t.ID || t.Settled() || t.CancelRequested {
			return nil
		}
		q, err := tx.Queue(ctx, ref.WorkspaceID, ref.SessionID)
		if err != nil || q.FenceTurnID == t.ID {
			return err
		}
		now := h.nowUTC()
		rev := int64(0)
		for _, e := range q.Entries {
			if e.Disposition != DispositionSteering || e.TargetTurnID != t.ID {
				continue
			}
			e.State, e.TurnID, e.UpdatedAt = QueuePulled, t.ID, now
			if e, err = tx.UpdateQueueEntry(ctx, e); err != nil {
				return err
			}
			rev = e.Revision
			s.MessageVersion++
			if err := tx.PutMessage(ctx, entryMessage(s, t.ID, e, now)); err != nil {
				return err
			}
			pulled = append(pulled, e)
		}
		if len(pulled) == 0 {
			return nil
		}
		s.UpdatedAt = now
		if err := tx.UpdateSession(ctx, s); err != nil {
			return err
		}
		emit(queueFact(s.WorkspaceID, s.ID, rev),
			Fact{WorkspaceID: s.WorkspaceID, Kind: FactTranscriptAdvanced, SessionID: s.ID, Version: s.MessageVersion})
		return nil
	})
	if err != nil {
		// Nothing is handed over unless the pull is proven durable: a
		// lost acknowledgement is resolved from the entries themselves.
		return h.resolvePull(ctx, ref, pulled, err)
	}
	return steeringMessages(pulled), nil
}

// resolvePull answers a pull whose commit reported an error: if every
// entry is durably pulled into the Turn the commit landed and they are
// delivered; if none is, nothing was pulled. If it cannot be told, the
// Host stops driving the session (fail-stop): its runtime is released so
// the Turn settles unknown and the entries with it, never delivered twice
// and never silently dropped.
func (h *Host) resolvePull(ctx context.Context, ref TurnRef, cand []QueueEntry, cause error) ([]SteeringMessage, error) {
	if len(cand) == 0 || !errors.Is(cause, ErrUnavailable) {
		return nil, cause
	}
	landed := 0
	for _, c := range cand {
		e, err := h.store.GetQueueEntry(ctx, ref.WorkspaceID, ref.SessionID, c.ID)
		if err != nil {
			h.failStop(ctx, ref, err)
			return nil, cause
		}
		if e.State == QueuePulled && e.TurnID == ref.TurnID {
			landed++
		}
	}
	switch landed {
	case 0:
		return nil, cause
	case len(cand):
		return steeringMessages(cand), nil
	}
	h.failStop(ctx, ref, cause) // cannot happen with one transaction; never guess
	return nil, cause
}

// failStop gives up a session whose delivered effects cannot be proven,
// instead of writing on as an ambiguous owner: the session lease (this
// Host epoch's ownership) is released and the runtime binding dropped
// (the agent's prompt is cancelled). Whoever owns the session next
// recovers it from what is durable: the Turn settles unknown and the
// entries it pulled with it, never delivered twice.
func (h *Host) failStop(ctx context.Context, ref TurnRef, cause error) {
	ctx = context.WithoutCancel(ctx)
	h.queue.mu.Lock()
	h.queue.unproven[ref.TurnID] = true
	h.queue.mu.Unlock()
	h.log.Error("queue: cannot prove a steering delivery; giving up the session", "session", ref.SessionID, "turn", ref.TurnID, "err", cause)
	if ls := h.leases(); ls != nil {
		if gen, ok := h.own.generation(ref.WorkspaceID, ref.SessionID); ok {
			if err := ls.ReleaseLease(ctx, ref.WorkspaceID, ref.SessionID, h.epoch, gen); err != nil {
				h.log.Warn("queue: release lease after fail-stop failed; it expires", "session", ref.SessionID, "err", err)
			}
			h.own.drop(ref.WorkspaceID, ref.SessionID, gen)
		}
	}
	if err := h.runtime.Release(ctx, ref.WorkspaceID, ref.SessionID); err != nil {
		h.log.Warn("queue: runtime release after fail-stop failed", "session", ref.SessionID, "err", err)
	}
}

func steeringMessages(es []QueueEntry) []SteeringMessage {
	out := make([]SteeringMessage, 0, len(es))
	for _, e := range es {
		out = append(out, SteeringMessage{EntryID: e.ID, Author: e.AuthorName, Content: e.Content})
	}
	return out
}

// entryMessage is the transcript message of a queue entry that reached
// turn turnID; s.MessageVersion is already the new version.
func entryMessage(s Session, turnID string, e QueueEntry, now time.Time) Message {
	return Message{
		WorkspaceID: s.WorkspaceID, SessionID: s.ID, ID: turnID + ".q." + e.ID, TurnID: turnID,
		Role: RoleUser, Kind: KindText, Version: s.MessageVersion, Ordinal: s.MessageVersion,
		Content: e.Content, Author: e.Author, AuthorName: e.AuthorName, CreatedAt: e.CreatedAt, UpdatedAt: now,
	}
}

// handoffIn runs inside the transaction that settles t (s is the session
// with t already no longer active): the entries t consumed end, the fence
// on t is lifted, and when entries wait, the successor Turn is admitted
// from the waiting steering (in order) followed by the next follow-up. It
// updates *s; the caller writes it.
func (h *Host) handoffIn(ctx context.Context, tx Tx, emit func(...Fact), s *Session, t Turn) error {
	now := h.nowUTC()
	rev := int64(0)
	consumed, err := tx.TurnQueueEntries(ctx, t.WorkspaceID, t.SessionID, t.ID)
	if err != nil {
		return err
	}
	// What reached a turn whose end is not known (the process died, the
	// agent lost its state) is unknown: never run again, never claimed done.
	end := QueueDone
	if t.Outcome == OutcomeFailed && (t.FailureReason == ReasonExecutionStatusUnknown ||
		t.FailureReason == ReasonDeliveryUnknown || t.FailureReason == ReasonProviderStateLost) {
		end = QueueUnknown
	}
	h.queue.mu.Lock()
	if h.queue.unproven[t.ID] {
		end = QueueUnknown
	}
	h.queue.mu.Unlock()
	for _, e := range consumed {
		if e.State != QueuePulled && e.State != QueueStarted {
			continue
		}
		e.State, e.UpdatedAt = end, now
		if e, err = tx.UpdateQueueEntry(ctx, e); err != nil {
			return err
		}
		rev = e.Revision
	}
	q, err := tx.Queue(ctx, t.WorkspaceID, t.SessionID)
	if err != nil {
		return err
	}
	if q.FenceTurnID == t.ID {
		if rev, err = tx.SetQueueFence(ctx, t.WorkspaceID, t.SessionID, ""); err != nil {
			return err
		}
	}
	next := nextRun(q)
	// A session whose agent context is lost still admits the successor: it
	// waits queued (not sent) until a member continues in a fresh agent
	// session, which sends it — the order of the queue is kept.
	if len(next) == 0 || s.ActiveTurnID != "" || !visible(*s) || s.ParentID != "" {
		if rev != 0 {
			emit(queueFact(t.WorkspaceID, t.SessionID, rev))
		}
		return nil
	}
	succ, err := h.admitQueuedIn(ctx, tx, emit, s, next, now)
	if err != nil {
		return err
	}
	for _, e := range next {
		e.State, e.TurnID, e.UpdatedAt = QueueStarted, succ.ID, now
		if e, err = tx.UpdateQueueEntry(ctx, e); err != nil {
			return err
		}
		rev = e.Revision
	}
	emit(queueFact(t.WorkspaceID, t.SessionID, rev))
	h.queue.mu.Lock()
	h.queue.handoff[t.ID] = TurnRef{WorkspaceID: succ.WorkspaceID, SessionID: succ.SessionID, TurnID: succ.ID}
	h.queue.mu.Unlock()
	return nil
}

// nextRun is what the next Turn of an idle session runs: its waiting
// steering folded ahead of the first follow-up.
func nextRun(q Queue) []QueueEntry {
	var next []QueueEntry
	for _, e := range q.Entries {
		if e.Disposition == DispositionSteering {
			next = append(next, e) // unpulled steering folds ahead
		}
	}
	for _, e := range q.Entries {
		if e.Disposition == DispositionFollowup {
			next = append(next, e)
			break
		}
	}
	return next
}

// admitQueuedIn admits the Turn that runs entries: a Host-owned claim
// (reserved id) whose content is the entries' content in order, the
// queued Turn (credited to the first entry's author), one user message
// per entry, and the session's active turn.
func (h *Host) admitQueuedIn(ctx context.Context, tx Tx, emit func(...Fact), s *Session, entries []QueueEntry, now time.Time) (Turn, error) {
	turnID := h.newID("turn")
	content := foldContent(entries)
	agent := h.runtime.Describe()
	first := entries[0]
	turn := Turn{
		WorkspaceID: s.WorkspaceID, SessionID: s.ID, ID: turnID, Seq: s.TurnCount + 1, Origin: "user",
		Phase: PhaseQueued, ClientSubmitID: QueueSubmitPrefix + turnID, SubmittedBy: first.Author,
		CreatedAt: now, UpdatedAt: now,
		TurnLabels: TurnLabels{SubmittedByName: first.AuthorName, Agent: &agent},
	}
	claim := SubmitClaim{
		WorkspaceID: s.WorkspaceID, ClientSubmitID: turn.ClientSubmitID, SessionID: s.ID, TurnID: turnID,
		Digest: content.Digest(), Content: content, State: ClaimPrepared, CreatedAt: now, UpdatedAt: now,
	}
	if err := tx.InsertClaim(ctx, claim); err != nil {
		return turn, err
	}
	if err := tx.InsertTurn(ctx, turn); err != nil {
		return turn, err
	}
	s.TurnCount = turn.Seq
	for _, e := range entries {
		s.MessageVersion++
		if err := tx.PutMessage(ctx, entryMessage(*s, turnID, e, now)); err != nil {
			return turn, err
		}
	}
	s.ActiveTurnID = turnID
	s.UpdatedAt = now
	h.work.adopt(turnID) // the reconciler dispatches it if nothing else does
	emit(Fact{WorkspaceID: s.WorkspaceID, Kind: FactSessionChanged, SessionID: s.ID, TurnID: turnID},
		Fact{WorkspaceID: s.WorkspaceID, Kind: FactTranscriptAdvanced, SessionID: s.ID, Version: s.MessageVersion},
		turnFact(turn))
	return turn, nil
}

// foldContent is the prompt of a Turn run from several entries: their
// texts in order, separated by a blank line, with every attachment and
// quote.
func foldContent(es []QueueEntry) MessageContent {
	if len(es) == 1 {
		return es[0].Content
	}
	var text, display []string
	var out MessageContent
	anyDisplay := false
	for _, e := range es {
		text = append(text, e.Content.Text)
		display = append(display, e.Content.Display())
		anyDisplay = anyDisplay || e.Content.DisplayText != ""
		out.Attachments = append(out.Attachments, e.Content.Attachments...)
		out.Quotes = append(out.Quotes, e.Content.Quotes...)
	}
	out.Text = strings.Join(text, "\n\n")
	if anyDisplay {
		out.DisplayText = strings.Join(display, "\n\n")
	}
	return out
}

// takeSuccessor hands the successor admitted when turnID settled to the
// dispatcher; committed says whether that settlement committed.
func (h *Host) takeSuccessor(turnID string, committed bool) {
	h.queue.mu.Lock()
	ref, ok := h.queue.handoff[turnID]
	delete(h.queue.handoff, turnID)
	if committed {
		delete(h.queue.unproven, turnID) // its entries are settled
	}
	h.queue.mu.Unlock()
	if !ok || !committed {
		return
	}
	select {
	case h.queue.successors <- ref:
	default: // full: the reconciler dispatches it
	}
}

// runSuccessors dispatches successor Turns as soon as their predecessor
// settled, until ctx ends. redrive's drive claim and the queued →
// dispatched commit keep it exact against the reconciler.
func (h *Host) runSuccessors(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ref := <-h.queue.successors:
			t, err := h.store.GetTurn(ctx, ref.WorkspaceID, ref.SessionID, ref.TurnID)
			if err != nil || t.Phase != PhaseQueued {
				continue
			}
			if _, err := h.redrive(ctx, t); err != nil && ctx.Err() == nil {
				h.log.Warn("queue: successor dispatch failed; the reconciler retries", "turn", t.ID, "err", err)
			}
		}
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

// PullSteering implements SteeringSource for the runtime.
func (k *turnSink) PullSteering(ctx context.Context) ([]SteeringMessage, error) {
	return k.h.pullSteering(ctx, k.ref)
}
