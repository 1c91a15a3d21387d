package host

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Durable runtime operations: prepared → leased → completed | failed.
//
// RespondInteraction prepares one operation per answered interaction in the
// same transaction that decides the winner. A worker leases it, delivers the
// answer through the InteractionResponder and checkpoints the runtime's
// authoritative result. A failed attempt goes back to prepared with a
// backoff; a lease that is never completed expires (or, at startup, is
// requeued by Recover) and the operation is delivered again — the runtime
// makes a repeated delivery of the same operation reach the provider at
// most once. A follow-up intent returned after a denial is checkpointed on
// the operation and submitted through SendInput, under the stable id
// "interactive-deny:<operation-id>", once the answered Turn is idle.
const (
	opLease       = 30 * time.Second
	opPoll        = time.Second
	opIdlePoll    = 500 * time.Millisecond
	opBusyRetry   = 2 * time.Second
	opMaxAttempts = 40
	opBatch       = 64
	opParallel    = 16
	opMaxBackoff  = 30 * time.Second
)

// QuarantineKindOperation is the Quarantined.Kind of a runtime operation;
// its key is "<workspace>/<operation id>".
const QuarantineKindOperation = "runtime_operation"

// errLeaseLost: another worker owns the operation now; this one's result
// is dropped (the delivery itself is idempotent in the runtime).
var errLeaseLost = errors.New("runtime operation lease lost")

func (h *Host) wakeOps() {
	select {
	case h.opsWake <- struct{}{}:
	default:
	}
}

// RunOperations runs the runtime-operation worker and the turn reconciler
// (reconcile.go) until ctx ends. Each due
// operation runs in its own goroutine (at most opParallel at once); the
// worker waits for all of them before it returns.
func (h *Host) RunOperations(ctx context.Context) {
	var (
		mu       sync.Mutex
		inflight = map[string]bool{}
		wg       sync.WaitGroup
	)
	defer wg.Wait()
	wg.Go(func() { h.runReconciler(ctx) })
	wg.Go(func() { h.runGoals(ctx) })
	wg.Go(func() { h.runSuccessors(ctx) })
	sem := make(chan struct{}, opParallel)
	tick := time.NewTicker(opPoll)
	defer tick.Stop()
	for {
		ops, _, err := h.dueOperations(ctx)
		if err != nil && ctx.Err() == nil {
			h.log.Warn("runtime operations: scan failed", "err", err)
		}
		for _, op := range ops {
			key := op.WorkspaceID + "/" + op.ID
			mu.Lock()
			busy := inflight[key]
			inflight[key] = true
			mu.Unlock()
			if busy {
				continue
			}
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			wg.Go(func() {
				defer func() {
					<-sem
					mu.Lock()
					delete(inflight, key)
					mu.Unlock()
				}()
				h.runOperation(ctx, op, true)
			})
		}
		select {
		case <-ctx.Done():
			return
		case <-h.opsWake:
		case <-tick.C:
		}
	}
}

// ProcessOperations runs every due operation once, one after the other,
// and reports how many it ran. It is the worker's single pass, for focused
// wiring and tests.
func (h *Host) ProcessOperations(ctx context.Context) (int, error) {
	n, _, err := h.processDue(ctx, true)
	return n, err
}

// processDue runs the due operations sequentially. Without followUps only
// deliveries run (startup recovery: no prompt is submitted before the
// Host serves).
func (h *Host) processDue(ctx context.Context, followUps bool) (int, []Quarantined, error) {
	ops, bad, err := h.dueOperations(ctx)
	if err != nil {
		return 0, bad, err
	}
	n := 0
	for _, op := range ops {
		if !followUps && op.Result != "" {
			continue
		}
		h.runOperation(ctx, op, followUps)
		n++
	}
	return n, bad, nil
}

// dueOperations scans for due operations and quarantines the ones that
// cannot be decoded or whose id disagrees with their identity tuple: that
// is an invariant failure, so the row is set aside, never rewritten.
func (h *Host) dueOperations(ctx context.Context) ([]RuntimeOperation, []Quarantined, error) {
	ops, bad, err := h.store.DueRuntimeOperations(ctx, h.now(), opBatch)
	if err != nil {
		return nil, nil, err
	}
	var good []RuntimeOperation
	for _, op := range ops {
		if want := OperationIDFor(op.InteractionRef()); op.ID != want || op.Kind != OperationKindInteractionResponse {
			bad = append(bad, Quarantined{WorkspaceID: op.WorkspaceID, Kind: QuarantineKindOperation,
				Key: op.WorkspaceID + "/" + op.ID, Reason: fmt.Sprintf("operation id or kind disagrees with its identity (kind %q)", op.Kind)})
			continue
		}
		good = append(good, op)
	}
	for i := range bad {
		bad[i].At = h.nowUTC()
		if err := h.store.Quarantine(ctx, bad[i]); err != nil {
			return good, bad, fmt.Errorf("quarantine %s %s: %w", bad[i].Kind, bad[i].Key, err)
		}
		h.log.Error("runtime operation quarantined", "key", bad[i].Key, "reason", bad[i].Reason)
	}
	return good, bad, nil
}

// runOperation leases one operation and runs its next step.
func (h *Host) runOperation(ctx context.Context, op RuntimeOperation, followUps bool) {
	if h.runsElsewhere(ctx, op.WorkspaceID, op.SessionID) {
		return // the owner's runtime holds the request: its worker delivers
	}
	op, ok, err := h.leaseOperation(ctx, op)
	if err != nil {
		if ctx.Err() == nil {
			h.log.Warn("runtime operation: lease failed", "operation", op.ID, "err", err)
		}
		return
	}
	if !ok {
		return
	}
	switch {
	case op.Result == "":
		h.deliver(ctx, op)
	case op.FollowUp != nil && op.FollowUpTurnID == "" && followUps:
		h.submitFollowUp(ctx, op)
	case op.FollowUp != nil && op.FollowUpTurnID == "":
		h.deferOperation(ctx, op, 0, "")
	default:
		h.finishOperation(ctx, op, "")
	}
}

// leaseOperation takes the operation if it is still due.
func (h *Host) leaseOperation(ctx context.Context, op RuntimeOperation) (RuntimeOperation, bool, error) {
	var out RuntimeOperation
	ok := false
	err := h.commit(ctx, func(tx Tx, _ func(...Fact)) error {
		cur, err := tx.RuntimeOperation(ctx, op.WorkspaceID, op.ID)
		if err != nil {
			return err
		}
		now := h.nowUTC()
		due := (cur.State == OperationPrepared && !cur.NextAttemptAt.After(now)) ||
			(cur.State == OperationLeased && cur.LeaseExpiresAt != nil && !cur.LeaseExpiresAt.After(now))
		if !due {
			return nil
		}
		exp := now.Add(opLease)
		cur.State, cur.LeaseReplica, cur.LeaseEpoch, cur.LeaseExpiresAt = OperationLeased, h.replica, h.epoch, &exp
		cur.Attempts++
		cur.UpdatedAt = now
		if err := tx.UpdateRuntimeOperation(ctx, cur); err != nil {
			return err
		}
		out, ok = cur, true
		return nil
	})
	return out, ok, err
}

// deliver hands the answer to the runtime and checkpoints its result.
func (h *Host) deliver(ctx context.Context, op RuntimeOperation) {
	it, err := h.store.GetInteraction(ctx, op.InteractionRef())
	if errors.Is(err, ErrNotFound) {
		h.failOperation(ctx, op, "the interaction no longer exists", "")
		return
	}
	if err != nil {
		h.retryOperation(ctx, op, err)
		return
	}
	opt, ok := it.option(op.Response.OptionID)
	if !ok {
		h.failOperation(ctx, op, "the answer names no option of the interaction", ResolutionDeliveryFailed)
		return
	}
	rep := DeliveryReport{Result: DeliverySuperseded, Reason: "no_responder"}
	if h.runtime != nil { // nil: a read-only Host delivers nothing
		dctx, cancel := context.WithTimeout(ctx, respondTimeout)
		rep, err = h.runtime.RespondInteraction(dctx, InteractionDelivery{
			Ref: op.InteractionRef(), OperationID: op.ID, Kind: it.Kind, Title: it.Title,
			Option: opt, Payload: op.Response.Payload, AnsweredBy: op.RespondedByName,
		})
		cancel()
	}
	if ctx.Err() != nil {
		// Stopping (or a crash in tests): write nothing; the lease expires
		// or the next start requeues the operation.
		return
	}
	if err == nil && rep.Result != DeliveryDelivered && rep.Result != DeliverySuperseded {
		err = fmt.Errorf("runtime reported delivery result %q", rep.Result)
	}
	if err != nil {
		h.retryOperation(ctx, op, err)
		return
	}
	if rep.FollowUp != nil {
		fu, ferr := rep.FollowUp.Normalize()
		if ferr != nil {
			h.log.Warn("runtime returned an unusable follow-up intent; dropping it", "operation", op.ID, "err", ferr)
			rep.FollowUp = nil
		} else {
			rep.FollowUp = &fu
		}
	}
	err = h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		cur, err := h.fenced(ctx, tx, op)
		if err != nil {
			return err
		}
		now := h.nowUTC()
		cur.Result, cur.Reason, cur.FollowUp, cur.LastError = rep.Result, rep.Reason, rep.FollowUp, ""
		cur.LeaseReplica, cur.LeaseEpoch, cur.LeaseExpiresAt, cur.UpdatedAt = "", "", nil, now
		if rep.FollowUp != nil {
			cur.State, cur.NextAttemptAt, cur.Attempts = OperationPrepared, now, 0
		} else {
			cur.State = OperationCompleted
		}
		if err := tx.UpdateRuntimeOperation(ctx, cur); err != nil {
			return err
		}
		return h.resolveInteraction(ctx, tx, emit, op, rep)
	})
	if err != nil {
		h.logOpErr(ctx, op, "checkpoint delivery", err)
		return
	}
	if rep.FollowUp != nil {
		h.wakeOps()
	}
}

// resolveInteraction applies the runtime's authoritative result to the
// interaction. The pre-delivery answered marker never overwrites it: a
// superseded result moves answered on to superseded.
func (h *Host) resolveInteraction(ctx context.Context, tx Tx, emit func(...Fact), op RuntimeOperation, rep DeliveryReport) error {
	it, err := tx.Interaction(ctx, op.InteractionRef())
	if err != nil {
		return err
	}
	if it.State != InteractionAnswered {
		return nil
	}
	it.UpdatedAt = h.nowUTC()
	if rep.Result == DeliverySuperseded {
		it.State, it.Resolution = InteractionSuperseded, rep.Reason
		if it.Resolution == "" {
			it.Resolution = ResolutionProviderGone
		}
	} else {
		it.Resolution = ResolutionDelivered
	}
	if err := tx.UpdateInteraction(ctx, it, InteractionAnswered); err != nil {
		return err
	}
	s, err := tx.Session(ctx, it.WorkspaceID, it.SessionID)
	if err != nil {
		return err
	}
	return emitTree(ctx, tx, emit, s)
}

// submitFollowUp submits the checkpointed follow-up once the answered Turn
// is idle. The stable ClientSubmitID makes every retry (on any replica,
// after any restart) return the same Turn instead of a second one.
func (h *Host) submitFollowUp(ctx context.Context, op RuntimeOperation) {
	t, err := h.store.GetTurn(ctx, op.WorkspaceID, op.SessionID, op.TurnID)
	if errors.Is(err, ErrNotFound) {
		h.failOperation(ctx, op, "the answered turn no longer exists", "")
		return
	}
	if err != nil {
		h.retryOperation(ctx, op, err)
		return
	}
	if !t.Settled() {
		h.deferOperation(ctx, op, opIdlePoll, "")
		return
	}
	res, err := h.sendInput(ctx, SendInput{
		WorkspaceID: op.WorkspaceID, SessionID: op.SessionID, ClientSubmitID: DenyFollowUpPrefix + op.ID,
		Content: *op.FollowUp, SubmittedBy: op.RespondedBy, SubmittedByName: op.RespondedByName,
	})
	if ctx.Err() != nil && err != nil {
		return
	}
	switch CodeOf(err) {
	case "":
		if res.Turn == nil {
			h.retryOperation(ctx, op, errors.New("follow-up submit returned no turn"))
			return
		}
		h.finishOperation(ctx, op, res.Turn.ID)
	case CodeSessionBusy:
		// Another turn runs: wait for the session to be idle, uncounted.
		h.deferOperation(ctx, op, opBusyRetry, "session busy")
	case CodeNotFound, CodeInvalidInput, CodeOperationConflict, CodeUnsupported, CodeForbidden:
		h.failOperation(ctx, op, "follow-up refused: "+err.Error(), "")
	default:
		// outcome_unknown keeps the claim: the next attempt replays it and
		// returns its Turn without a second dispatch.
		h.retryOperation(ctx, op, err)
	}
}

// fenced rereads the operation inside tx and checks this worker still
// holds its lease.
func (h *Host) fenced(ctx context.Context, tx Tx, op RuntimeOperation) (RuntimeOperation, error) {
	cur, err := tx.RuntimeOperation(ctx, op.WorkspaceID, op.ID)
	if err != nil {
		return cur, err
	}
	if cur.State != OperationLeased || cur.LeaseEpoch != h.epoch || cur.LeaseReplica != h.replica {
		return cur, errLeaseLost
	}
	return cur, nil
}

// retryOperation returns the operation to prepared with a backoff, or
// fails it after too many attempts.
func (h *Host) retryOperation(ctx context.Context, op RuntimeOperation, cause error) {
	if op.Attempts >= opMaxAttempts {
		res := ""
		if op.Result == "" {
			res = ResolutionDeliveryFailed
		}
		h.failOperation(ctx, op, "gave up after repeated failures: "+cause.Error(), res)
		return
	}
	backoff := 250 * time.Millisecond << min(op.Attempts-1, 8)
	backoff = min(backoff, opMaxBackoff)
	err := h.commit(ctx, func(tx Tx, _ func(...Fact)) error {
		cur, err := h.fenced(ctx, tx, op)
		if err != nil {
			return err
		}
		now := h.nowUTC()
		cur.State, cur.NextAttemptAt, cur.LastError = OperationPrepared, now.Add(backoff), truncateErr(cause)
		cur.LeaseReplica, cur.LeaseEpoch, cur.LeaseExpiresAt, cur.UpdatedAt = "", "", nil, now
		return tx.UpdateRuntimeOperation(ctx, cur)
	})
	if err != nil {
		h.logOpErr(ctx, op, "reschedule", err)
		return
	}
	h.log.Warn("runtime operation attempt failed; will retry", "operation", op.ID, "attempt", op.Attempts, "in", backoff, "err", cause)
}

// deferOperation reschedules without counting the attempt (waiting for an
// idle session is not a failure).
func (h *Host) deferOperation(ctx context.Context, op RuntimeOperation, d time.Duration, note string) {
	err := h.commit(ctx, func(tx Tx, _ func(...Fact)) error {
		cur, err := h.fenced(ctx, tx, op)
		if err != nil {
			return err
		}
		now := h.nowUTC()
		cur.State, cur.NextAttemptAt, cur.Attempts = OperationPrepared, now.Add(d), max(cur.Attempts-1, 0)
		cur.LeaseReplica, cur.LeaseEpoch, cur.LeaseExpiresAt, cur.UpdatedAt = "", "", nil, now
		if note != "" {
			cur.LastError = note
		}
		return tx.UpdateRuntimeOperation(ctx, cur)
	})
	if err != nil {
		h.logOpErr(ctx, op, "defer", err)
	}
}

// finishOperation completes the operation, recording the follow-up Turn.
func (h *Host) finishOperation(ctx context.Context, op RuntimeOperation, followUpTurnID string) {
	err := h.commit(ctx, func(tx Tx, _ func(...Fact)) error {
		cur, err := h.fenced(ctx, tx, op)
		if err != nil {
			return err
		}
		now := h.nowUTC()
		cur.State, cur.LastError, cur.UpdatedAt = OperationCompleted, "", now
		if followUpTurnID != "" {
			cur.FollowUpTurnID = followUpTurnID
		}
		cur.LeaseReplica, cur.LeaseEpoch, cur.LeaseExpiresAt = "", "", nil
		return tx.UpdateRuntimeOperation(ctx, cur)
	})
	if err != nil {
		h.logOpErr(ctx, op, "complete", err)
	}
}

// failOperation ends the operation as failed. With a resolution, an
// answered interaction it could not deliver becomes superseded.
func (h *Host) failOperation(ctx context.Context, op RuntimeOperation, why, resolution string) {
	err := h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		cur, err := h.fenced(ctx, tx, op)
		if err != nil {
			return err
		}
		now := h.nowUTC()
		cur.State, cur.LastError, cur.UpdatedAt = OperationFailed, why, now
		cur.LeaseReplica, cur.LeaseEpoch, cur.LeaseExpiresAt = "", "", nil
		if err := tx.UpdateRuntimeOperation(ctx, cur); err != nil {
			return err
		}
		if resolution == "" {
			return nil
		}
		return h.resolveInteraction(ctx, tx, emit, op, DeliveryReport{Result: DeliverySuperseded, Reason: resolution})
	})
	if err != nil {
		h.logOpErr(ctx, op, "fail", err)
		return
	}
	h.log.Error("runtime operation failed", "operation", op.ID, "why", why)
}

func (h *Host) logOpErr(ctx context.Context, op RuntimeOperation, what string, err error) {
	if ctx.Err() != nil {
		return
	}
	if errors.Is(err, errLeaseLost) {
		h.log.Info("runtime operation: another worker took over", "operation", op.ID, "step", what)
		return
	}
	h.log.Warn("runtime operation: "+what+" failed; the lease expires and it runs again", "operation", op.ID, "err", err)
}

func truncateErr(err error) string {
	s := err.Error()
	if len(s) > 500 {
		s = s[:500] + "…"
	}
	return s
}
