package host

import (
	"context"
	"strings"
	"time"
)

// Terminal handoff (see queue.go): the transaction that settles a Turn ends
// the entries it consumed and admits the successor Turn from the queue; the
// successor is dispatched once that settlement committed.

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
	// The claim's id is new (the Turn's), so no caller goes on after a
	// duplicate: a store may send the insert with COMMIT.
	if err := tx.AdmitClaim(ctx, claim); err != nil {
		return turn, err
	}
	if err := tx.InsertTurn(ctx, turn); err != nil {
		return turn, err
	}
	s.TurnCount = turn.Seq
	msgs := make([]Message, len(entries))
	for i, e := range entries {
		msgs[i] = entryMessage(*s, turnID, e, now)
	}
	prompt, err := putMessages(ctx, tx, s, now, msgs...)
	if err != nil {
		return turn, err
	}
	s.ActiveTurnID = turnID
	s.UpdatedAt = now
	h.work.adopt(turnID) // the reconciler dispatches it if nothing else does
	emit(prompt, turnFact(turn))
	// The tree moves to the new latest Turn.
	return turn, emitTreeAt(ctx, tx, emit, *s, turn)
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
