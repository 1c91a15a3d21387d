package host

import (
	"context"
	"fmt"
)

// Recover runs before serving. Every Turn past queued left unsettled by a
// previous process has no authoritative terminal, so it is settled failed
// with execution_status_unknown; its prepared submit claim stays prepared
// and is never redispatched. A queued Turn was never sent: it stays queued
// and the reconciler (RunOperations) dispatches it. A record that cannot be processed is quarantined and
// reported; only a failure to persist that quarantine fails recovery.
//
// Durable runtime operations are recovered first, before any stale turn is
// settled: the operations a previous process of this replica had leased
// are requeued, and every due delivery is attempted once, so the runtime
// (not the turn settlement) decides whether each answered provider request
// still exists. Follow-up prompts wait for the worker (Run).
func (h *Host) Recover(ctx context.Context) (RecoveryReport, error) {
	var rep RecoveryReport
	n, err := h.store.RequeueRuntimeOperations(ctx, h.replica, h.now())
	if err != nil {
		return rep, fmt.Errorf("recovery: requeue runtime operations: %w", err)
	}
	rep.RequeuedOperations = n
	ran, badOps, err := h.processDue(ctx, false)
	rep.Quarantined = append(rep.Quarantined, badOps...)
	if err != nil {
		return rep, fmt.Errorf("recovery: runtime operations: %w", err)
	}
	rep.RecoveredOperations = ran
	// Goal fences, then goal operations, before any stale turn is settled.
	badGoals, err := h.recoverGoals(ctx)
	rep.Quarantined = append(rep.Quarantined, badGoals...)
	if err != nil {
		return rep, err
	}

	turns, bad, err := h.store.UnsettledTurns(ctx)
	if err != nil {
		return rep, fmt.Errorf("recovery scan: %w", err)
	}
	quarantine := func(q Quarantined) error {
		q.At = h.nowUTC()
		if err := h.store.Quarantine(ctx, q); err != nil {
			return fmt.Errorf("quarantine %s %s: %w", q.Kind, q.Key, err)
		}
		h.log.Error("recovery quarantined a record", "kind", q.Kind, "key", q.Key, "reason", q.Reason)
		rep.Quarantined = append(rep.Quarantined, q)
		return nil
	}
	for _, q := range bad {
		if err := quarantine(q); err != nil {
			return rep, err
		}
	}
	for _, t := range turns {
		if h.ownedElsewhere(ctx, t) {
			continue // a live replica runs it (cluster mode)
		}
		if t.Phase == PhaseQueued {
			// Never sent: the reconciler dispatches it (exactly once).
			h.work.adopt(t.ID)
			continue
		}
		ref := TurnRef{WorkspaceID: t.WorkspaceID, SessionID: t.SessionID, TurnID: t.ID}
		if _, err := h.settle(ctx, ref, Terminal{Outcome: OutcomeFailed, Reason: ReasonExecutionStatusUnknown}, ""); err != nil {
			if CodeOf(err) == CodeUnavailable {
				return rep, fmt.Errorf("recovery settle %s: %w", t.ID, err)
			}
			if qerr := quarantine(Quarantined{WorkspaceID: t.WorkspaceID, Kind: "turn",
				Key: ref.Key(), Reason: err.Error()}); qerr != nil {
				return rep, qerr
			}
			continue
		}
		rep.SettledTurns = append(rep.SettledTurns, ref)
	}
	h.once.Do(func() { close(h.ready) })
	return rep, nil
}
