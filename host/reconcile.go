package host

import (
	"context"
	"errors"
	"maps"
	"sync"
	"time"
)

// The turn reconciler keeps every unsettled Turn moving toward a canonical
// terminal without ever guessing:
//
//   - a queued Turn with a prepared claim (the provider never saw it) is
//     dispatched again; the queued → dispatched commit is the guard, so it
//     reaches the provider at most once;
//   - a Turn past queued that no dispatch of this process drives any more
//     (its terminal write failed, or its runtime target is gone) is settled
//     with the terminal the runtime reported, or failed/
//     execution_status_unknown when nothing authoritative is known;
//   - a durable cancel intent is delivered to the runtime again until the
//     runtime confirms it or the Turn settles (then it is a no-op).
//
// Every step is retried on the next pass, whatever the error class, with a
// per-turn backoff.
const (
	reconcileEvery   = time.Second
	redriveGrace     = 500 * time.Millisecond
	reconcileBackoff = 30 * time.Second
)

// turnWork is the in-process registry of the Turns this Host drives.
type turnWork struct {
	mu sync.Mutex
	// driving: a dispatch of this process owns the Turn (from admission
	// until the runtime's terminal was handled or the dispatch gave up).
	driving map[string]bool
	// terminal: an authoritative terminal whose write failed.
	terminal map[string]pendingTerminal
	// cancelConfirmed: the runtime confirmed the cancel of this Turn.
	cancelConfirmed map[string]bool
	// retry: per-turn backoff of reconciler steps that failed.
	retry map[string]retryState
	// known: Turns this process admitted, drove or recovered, with when it
	// learned of them. Without leases (one replica) the reconciler only
	// touches these: another Host on the same store is no concern of it.
	known map[string]time.Time
	// unsent: Turns this process admitted already dispatched whose
	// admission it could not confirm (the acknowledgement was lost), so
	// it never sent them; a retry or the reconciler sends them, once.
	unsent map[string]time.Time
}

type pendingTerminal struct {
	term  Terminal
	claim ClaimState
}

type retryState struct {
	attempts int
	next     time.Time
}

func newTurnWork() turnWork {
	return turnWork{driving: map[string]bool{}, terminal: map[string]pendingTerminal{},
		cancelConfirmed: map[string]bool{}, retry: map[string]retryState{}, known: map[string]time.Time{},
		unsent: map[string]time.Time{}}
}

// drive claims the Turn for one dispatch of this process; false when one
// already drives it.
func (w *turnWork) drive(turnID string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.driving[turnID] {
		return false
	}
	w.driving[turnID] = true
	if _, ok := w.known[turnID]; !ok {
		w.known[turnID] = time.Now()
	}
	return true
}

// adopt records a Turn this process is responsible for without driving
// it yet (a queued Turn found by recovery).
func (w *turnWork) adopt(turnID string) {
	w.mu.Lock()
	if _, ok := w.known[turnID]; !ok {
		w.known[turnID] = time.Now()
	}
	w.mu.Unlock()
}

// markUnsent records that this process admitted the Turn dispatched and
// did not send it.
func (w *turnWork) markUnsent(turnID string) {
	w.mu.Lock()
	w.unsent[turnID] = time.Now()
	w.mu.Unlock()
}

// driveUnsent claims an unsent Turn for the dispatch that sends it; false
// when it is not unsent or a dispatch drives it already.
func (w *turnWork) driveUnsent(turnID string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.unsent[turnID]; !ok || w.driving[turnID] {
		return false
	}
	delete(w.unsent, turnID)
	w.driving[turnID] = true
	return true
}

func (w *turnWork) isKnown(turnID string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.known[turnID]
	return ok
}

func (w *turnWork) release(turnID string) {
	w.mu.Lock()
	delete(w.driving, turnID)
	w.mu.Unlock()
}

func (w *turnWork) isDriving(turnID string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.driving[turnID]
}

// pend remembers a terminal whose write failed, for the reconciler.
func (w *turnWork) pend(turnID string, t Terminal, claim ClaimState) {
	w.mu.Lock()
	w.terminal[turnID] = pendingTerminal{t, claim}
	w.mu.Unlock()
}

func (w *turnWork) pending(turnID string) (pendingTerminal, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p, ok := w.terminal[turnID]
	return p, ok
}

func (w *turnWork) confirmCancel(turnID string) {
	w.mu.Lock()
	w.cancelConfirmed[turnID] = true
	w.mu.Unlock()
}

func (w *turnWork) cancelDone(turnID string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cancelConfirmed[turnID]
}

// due reports whether a reconciler step for the Turn may run now.
func (w *turnWork) due(turnID string, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !now.Before(w.retry[turnID].next)
}

// failed backs the Turn's next step off exponentially.
func (w *turnWork) failed(turnID string, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.retry[turnID]
	r.attempts++
	r.next = now.Add(min(250*time.Millisecond<<min(r.attempts-1, 8), reconcileBackoff))
	w.retry[turnID] = r
}

// forget drops everything kept for a settled Turn.
func (w *turnWork) forget(turnID string) {
	w.mu.Lock()
	delete(w.terminal, turnID)
	delete(w.cancelConfirmed, turnID)
	delete(w.retry, turnID)
	delete(w.known, turnID)
	delete(w.unsent, turnID)
	w.mu.Unlock()
}

// prune forgets the backoff and cancel state of Turns that are no longer
// unsettled (for example settled by another replica). Pending terminals
// are only dropped by a settlement: one may belong to a Turn admitted
// after the scan.
func (w *turnWork) prune(unsettled map[string]bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	keep := func(id string) bool { return unsettled[id] || w.driving[id] }
	maps.DeleteFunc(w.retry, func(id string, _ retryState) bool { return !keep(id) })
	maps.DeleteFunc(w.cancelConfirmed, func(id string, _ bool) bool { return !keep(id) })
	// A Turn learned of after the scan is not in it: keep young entries.
	old := time.Now().Add(-time.Minute)
	maps.DeleteFunc(w.known, func(id string, at time.Time) bool { return !keep(id) && at.Before(old) })
	maps.DeleteFunc(w.unsent, func(id string, at time.Time) bool { return !keep(id) && at.Before(old) })
}

// runReconciler runs ReconcileTurns every reconcileEvery until ctx ends.
func (h *Host) runReconciler(ctx context.Context) {
	tick := time.NewTicker(reconcileEvery)
	defer tick.Stop()
	for {
		if _, err := h.ReconcileTurns(ctx); err != nil && ctx.Err() == nil {
			h.log.Warn("turn reconciler: pass failed; next pass retries", "err", err)
		}
		h.RetryReleases(ctx) // release_retry.go
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// ReconcileTurns runs one reconciler pass over every unsettled Turn and
// reports how many it acted on. Turns of sessions that a live replica
// owns are left to that replica.
func (h *Host) ReconcileTurns(ctx context.Context) (int, error) {
	turns, _, err := h.store.UnsettledTurns(ctx)
	if err != nil {
		return 0, storeErr(err, "unsettled turns")
	}
	n := 0
	unsettled := make(map[string]bool, len(turns))
	for _, t := range turns {
		unsettled[t.ID] = true
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		if h.reconcileTurn(ctx, t) {
			n++
		}
	}
	h.work.prune(unsettled)
	return n, nil
}

// reconcileTurn runs the one step the Turn needs, if any, and reports
// whether it ran one.
func (h *Host) reconcileTurn(ctx context.Context, t Turn) bool {
	now := h.now()
	if !h.work.due(t.ID, now) {
		return false
	}
	ref := TurnRef{WorkspaceID: t.WorkspaceID, SessionID: t.SessionID, TurnID: t.ID}
	if h.work.isDriving(t.ID) {
		if !t.CancelRequested || !t.Accepted() || h.work.cancelDone(t.ID) {
			return false
		}
		// The cancel intent is durable; its delivery is retried until the
		// runtime confirms it or the Turn settles.
		if !h.deliverCancel(ctx, ref) {
			h.work.failed(t.ID, now)
		}
		return true
	}
	if h.leases() == nil && !h.work.isKnown(t.ID) {
		return false
	}
	if h.runsElsewhere(ctx, t.WorkspaceID, t.SessionID) {
		return false
	}
	if h.leases() != nil {
		// A sub-agent Turn runs in its root session's runtime, which may
		// live on another replica.
		s, err := h.store.GetSession(ctx, t.WorkspaceID, t.SessionID)
		if err != nil || h.runsElsewhere(ctx, t.WorkspaceID, s.RootID) {
			return false
		}
	}
	if t.Phase == PhaseDispatched {
		if _, sent, err := h.sendUnsent(ctx, t); sent {
			if err != nil {
				h.log.Warn("turn reconciler: sending an unsent turn failed", "turn", t.ID, "err", err)
			}
			return true
		}
	}
	if t.Phase == PhaseQueued {
		if now.Sub(t.UpdatedAt) < redriveGrace {
			return false
		}
		if _, err := h.redrive(ctx, t); err != nil && !errors.Is(err, errContextLost) {
			h.log.Warn("turn reconciler: redrive failed; will retry", "turn", t.ID, "err", err)
			h.work.failed(t.ID, now)
		}
		return true
	}
	p, ok := h.work.pending(t.ID)
	if !ok {
		p.term = Terminal{Outcome: OutcomeFailed, Reason: ReasonExecutionStatusUnknown}
	}
	// t comes from the pass's list: a dispatch of this process may have
	// requeued and released it since (faults/reconciler_stale_list…).
	if _, err := h.settleSent(ctx, ref, p.term, p.claim); err != nil {
		h.log.Warn("turn reconciler: settle failed; will retry", "turn", t.ID, "err", err)
		h.work.failed(t.ID, now)
	}
	return true
}

// deliverCancel asks the runtime to stop the Turn once and records a
// confirmation; false when it must be asked again.
func (h *Host) deliverCancel(ctx context.Context, ref TurnRef) bool {
	rep, err := h.runtime.Cancel(ctx, ref)
	if err != nil {
		h.log.Warn("provider cancel failed; the intent stays durable and is delivered again", "turn", ref.TurnID, "err", err)
		return false
	}
	if rep.Confirmed {
		h.work.confirmCancel(ref.TurnID)
	}
	return rep.Confirmed
}

// sendUnsent dispatches a Turn this process admitted already dispatched
// but never sent (turnWork.unsent), once; sent is false when t is not
// such a Turn.
func (h *Host) sendUnsent(ctx context.Context, t Turn) (out Turn, sent bool, err error) {
	if !h.work.driveUnsent(t.ID) {
		return t, false, nil
	}
	retry := func(err error) (Turn, bool, error) {
		h.work.markUnsent(t.ID) // still unsent: the next retry or pass sends it
		h.work.release(t.ID)
		return t, true, err
	}
	// The Turn as it stands now, not as the caller's list had it: one
	// cancelled since is settled canceled instead of sent (it never was,
	// so the outcome is exact, as for a queued Turn).
	cur, err := h.store.GetTurn(ctx, t.WorkspaceID, t.SessionID, t.ID)
	if err != nil {
		return retry(err)
	}
	if !cur.Settled() && cur.CancelRequested {
		ref := TurnRef{WorkspaceID: t.WorkspaceID, SessionID: t.SessionID, TurnID: t.ID}
		if cur, err = h.settle(ctx, ref, Terminal{Outcome: OutcomeCanceled}, ""); err != nil {
			return retry(err)
		}
	}
	if cur.Settled() {
		h.work.release(t.ID)
		return cur, true, nil
	}
	t = cur
	// It was admitted to this replica's live provider session; send it
	// only while both still hold (otherwise it stays for the
	// reconciler's unknown outcome, as a Turn whose sending is unknown).
	_, mine, err := h.ownSession(ctx, t.WorkspaceID, t.SessionID, t.ID)
	if err != nil {
		return retry(err)
	}
	c, err := h.store.GetClaim(ctx, t.WorkspaceID, t.ClientSubmitID)
	if err != nil {
		return retry(err)
	}
	s, err := h.store.GetSession(ctx, t.WorkspaceID, t.SessionID)
	if err != nil {
		return retry(err)
	}
	live, _ := h.runtime.Live(t.WorkspaceID, t.SessionID)
	if !mine || c.TurnID != t.ID || c.State != ClaimPrepared || live == "" || live != s.ProviderSessionID {
		h.work.release(t.ID)
		return t, false, nil
	}
	out, err = h.dispatch(ctx, s, t, c, s.Provisional)
	return out, true, err
}

// redrive dispatches a queued Turn whose claim is still prepared and
// returns it. It is a no-op when another dispatch of this process drives
// it, and exact across processes: only one queued → dispatched commit can
// succeed.
func (h *Host) redrive(ctx context.Context, t Turn) (Turn, error) {
	if !h.work.drive(t.ID) {
		return t, nil
	}
	c, err := h.store.GetClaim(ctx, t.WorkspaceID, t.ClientSubmitID)
	if err == nil && c.TurnID == t.ID && c.State != ClaimPrepared {
		// Another process dispatched it since t was read (replicas do
		// not share drive claims): answer its current state.
		if cur, gerr := h.store.GetTurn(ctx, t.WorkspaceID, t.SessionID, t.ID); gerr == nil && cur.Phase != PhaseQueued {
			h.work.release(t.ID)
			return cur, nil
		}
	}
	if err == nil && (c.TurnID != t.ID || c.State != ClaimPrepared) {
		err = Errorf(CodeInternal, "queued turn %s has no prepared claim", t.ID)
	}
	var s Session
	if err == nil {
		s, err = h.store.GetSession(ctx, t.WorkspaceID, t.SessionID)
	}
	if err != nil {
		h.work.release(t.ID)
		return t, err
	}
	// dispatch answers errContextLost for a session that waits for a
	// member's choice (ContinueFresh).
	return h.dispatch(ctx, s, t, c, s.Provisional)
}
