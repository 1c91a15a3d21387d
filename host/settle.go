package host

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"
)

// settle moves a Turn to its canonical terminal once. A Turn that is already
// settled keeps its outcome. claimState, when set, moves the submit claim too.
func (h *Host) settle(ctx context.Context, ref TurnRef, term Terminal, claimState ClaimState) (Turn, error) {
	return h.settleWith(ctx, ref, term, claimState, false)
}

// settleSent is settle for a Turn the caller saw leave the queue, from a
// list that may be stale by now: a Turn found queued is left as it is (a
// dispatch of this process put it back before sending; it was never sent,
// so no outcome is unknown) and returned unsettled.
func (h *Host) settleSent(ctx context.Context, ref TurnRef, term Terminal, claimState ClaimState) (Turn, error) {
	return h.settleWith(ctx, ref, term, claimState, true)
}

// settleWith settles and closes every message of the Turn still streaming
// in the store (recovery, takeover and the reconciler know no keys, and an
// output whose acknowledgement was lost is not in the sink's open keys).
func (h *Host) settleWith(ctx context.Context, ref TurnRef, term Terminal, claimState ClaimState, sentOnly bool) (Turn, error) {
	openKeys, err := h.streamingKeys(ctx, ref)
	if err != nil {
		return Turn{}, err
	}
	var out Turn
	err = h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		t, err := tx.Turn(ctx, ref.WorkspaceID, ref.SessionID, ref.TurnID)
		if err != nil {
			return err
		}
		out = t
		if t.Settled() || sentOnly && t.Phase == PhaseQueued {
			return nil
		}
		s, err := tx.Session(ctx, ref.WorkspaceID, ref.SessionID)
		if err != nil {
			return err
		}
		out, err = h.settleIn(ctx, tx, emit, t, s, term, claimState, openKeys)
		return err
	})
	h.afterSettle(ref, out, err)
	return out, err
}

// settleIn settles the unsettled Turn t of session s inside tx: the Turn,
// its pending interactions, its still-open messages (openKeys), the
// session's active turn and, when claimState is set, the submit claim.
func (h *Host) settleIn(ctx context.Context, tx Tx, emit func(...Fact), t Turn, s Session, term Terminal, claimState ClaimState, openKeys []string) (Turn, error) {
	now := h.nowUTC()
	t.Phase, t.Outcome, t.UpdatedAt, t.SettledAt = PhaseSettled, term.Outcome, now, &now
	if term.Outcome != OutcomeCompleted {
		t.FailureReason = term.Reason
		if t.FailureReason == "" && term.Outcome == OutcomeCanceled {
			t.FailureReason = t.CancelReason // the runtime knows no why; the Host's intent does
		}
	}
	t.StopReason = term.StopReason
	if err := tx.UpdateTurn(ctx, t); err != nil {
		return t, err
	}
	ended, resolution := InteractionSuperseded, ResolutionTurnSettled
	if term.Outcome == OutcomeCanceled {
		ended, resolution = InteractionCanceled, ResolutionTurnCanceled
	}
	// The tree shows the latest Turns' interactions, not their phases: a
	// settlement that ended none left it as it was, and hubs need not
	// reread it (a successor admitted here says so itself).
	if n, err := endInteractions(ctx, tx, t, ended, resolution, now); err != nil {
		return t, err
	} else if n > 0 {
		if err := emitTreeAt(ctx, tx, emit, s, t); err != nil {
			return t, err
		}
	}
	var closing []MessageAppend
	for _, key := range slices.Compact(slices.Sorted(slices.Values(openKeys))) {
		m, err := tx.Message(ctx, t.WorkspaceID, t.SessionID, messageID(t, key))
		if errors.Is(err, ErrNotFound) || err == nil && !m.Streaming {
			continue // never written, or closed already
		}
		if err != nil {
			return t, err
		}
		closing = append(closing, MessageAppend{ID: key, Role: m.Role, Kind: m.Kind, Done: true})
	}
	if len(closing) > 0 {
		f, _, err := h.appendTranscript(ctx, tx, &s, t, closing, now, nil, false)
		if err != nil {
			return t, err
		}
		emit(f)
	}
	if s.ActiveTurnID == t.ID {
		s.ActiveTurnID = ""
		// Terminal handoff: the next queued input is admitted in this
		// same transaction (queue.go).
		if err := h.handoffIn(ctx, tx, emit, &s, t); err != nil {
			return t, err
		}
	}
	// A failed first delivery that is settled (rather than rolled back)
	// stays as history, so the session becomes visible.
	s.Provisional = false
	s.UpdatedAt = now
	if err := tx.UpdateSession(ctx, s); err != nil {
		return t, err
	}
	if claimState != "" && t.ClientSubmitID != "" {
		c, err := tx.Claim(ctx, t.WorkspaceID, t.ClientSubmitID)
		if err == nil && c.State == ClaimPrepared {
			c.State, c.UpdatedAt = claimState, now
			if err := tx.UpdateClaim(ctx, c); err != nil {
				return t, err
			}
		}
	}
	emit(turnFact(t))
	return t, nil
}

// settleRetrying settles like settle, retrying a transient store failure a
// few times: the failure that ended a dispatch (a lost connection) often
// fails the first attempt too, and recovery is the last resort.
func (h *Host) settleRetrying(ctx context.Context, ref TurnRef, term Terminal, claimState ClaimState) (Turn, error) {
	var t Turn
	err := retryTransient(ctx, 8, 50*time.Millisecond, func() (err error) {
		t, err = h.settle(ctx, ref, term, claimState)
		return err
	})
	return t, err
}

// afterSettle wakes what waits for a Turn to settle.
func (h *Host) afterSettle(ref TurnRef, t Turn, err error) {
	h.takeSuccessor(ref.TurnID, err == nil)
	if err == nil && t.Settled() {
		h.work.forget(ref.TurnID)
		h.settled.notify(ref.TurnID)
		h.wakeOps() // a follow-up may wait for this turn to be idle
		// A goal decides after its turn, or waits for an idle session.
		h.wakeGoals()
	}
}

// streamingKeys lists the message keys of the Turn that are still
// streaming in the store.
func (h *Host) streamingKeys(ctx context.Context, ref TurnRef) ([]string, error) {
	var keys []string
	q := MessageQuery{TurnID: ref.TurnID, Limit: 1000}
	for {
		p, err := h.store.ListMessages(ctx, ref.WorkspaceID, ref.SessionID, q)
		if err != nil {
			return nil, err
		}
		for _, m := range p.Messages {
			if m.Streaming && m.Role == RoleAgent {
				keys = append(keys, strings.TrimPrefix(m.ID, ref.TurnID+"."))
			}
			q.AfterVersion = m.Version
		}
		if !p.HasMore || len(p.Messages) == 0 {
			return keys, nil
		}
	}
}

// settleWaiters wakes the callers waiting for a Turn to settle in this
// process (waitSettled).
type settleWaiters struct {
	mu sync.Mutex
	m  map[string]chan struct{}
}

// wait returns the channel closed when turnID settles.
func (w *settleWaiters) wait(turnID string) chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch := w.m[turnID]
	if ch == nil {
		if w.m == nil {
			w.m = map[string]chan struct{}{}
		}
		ch = make(chan struct{})
		w.m[turnID] = ch
	}
	return ch
}

func (w *settleWaiters) notify(turnID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ch := w.m[turnID]; ch != nil {
		close(ch)
		delete(w.m, turnID)
	}
}

// waitSettled waits until the Turn settles in this process or d passes.
func (h *Host) waitSettled(ctx context.Context, ref TurnRef, d time.Duration) (Turn, error) {
	ch := h.settled.wait(ref.TurnID)
	t, err := h.store.GetTurn(ctx, ref.WorkspaceID, ref.SessionID, ref.TurnID)
	if err != nil || t.Settled() || d <= 0 {
		return t, err
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ch:
	case <-timer.C:
	case <-ctx.Done():
	}
	return h.store.GetTurn(context.WithoutCancel(ctx), ref.WorkspaceID, ref.SessionID, ref.TurnID)
}
