package host

import (
	"context"
	"errors"
)

// The pull cut for steering (see queue.go): the agent running a Turn pulls its
// waiting steering entries through the Turn's sink; a pull that cannot be
// proven durable stops the Host driving the session (fail-stop).

// PullSteering (SteeringSource) crosses the pull cut for the Turn's
// waiting steering: under the session lock, entries admitted for this Turn
// move queued → pulled, each with its user message in the transcript.
// Nothing is pulled into a Turn that is no longer the active one or that
// an interrupt fenced.
func (k *turnSink) PullSteering(ctx context.Context) ([]SteeringMessage, error) {
	h, ref := k.h, k.ref
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
		var msgs []Message
		for _, e := range q.Entries {
			if e.Disposition != DispositionSteering || e.TargetTurnID != t.ID {
				continue
			}
			e.State, e.TurnID, e.UpdatedAt = QueuePulled, t.ID, now
			if e, err = tx.UpdateQueueEntry(ctx, e); err != nil {
				return err
			}
			rev = e.Revision
			msgs = append(msgs, entryMessage(s, t.ID, e, now))
			pulled = append(pulled, e)
		}
		if len(pulled) == 0 {
			return nil
		}
		steer, err := putMessages(ctx, tx, &s, now, msgs...)
		if err != nil {
			return err
		}
		s.UpdatedAt = now
		if err := tx.UpdateSession(ctx, s); err != nil {
			return err
		}
		emit(queueFact(s.WorkspaceID, s.ID, rev), steer)
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
