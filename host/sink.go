package host

import (
	"context"
	"errors"
	"sync"
)

// errNotAccepted rejects output for a Turn whose provider identity is not
// durably bound: nothing becomes canonical before the barrier.
var errNotAccepted = errors.New("turn is not durably accepted")

// errTurnSettled tells the runtime the Turn already has a canonical terminal.
var errTurnSettled = errors.New("turn already settled")

// turnSink receives one Turn's runtime reports and makes them canonical.
type turnSink struct {
	h   *Host
	ref TurnRef

	mu           sync.Mutex
	acceptFailed bool
	// open holds message keys still streaming, closed at the terminal.
	open map[string]bool
}

func (k *turnSink) Observed(ctx context.Context, phase TurnPhase) error {
	if phaseRank(phase) < phaseRank(PhaseDispatched) || phaseRank(phase) >= phaseRank(PhaseDurablyAccepted) {
		return Errorf(CodeInternal, "runtime reported phase %q through Observed", phase)
	}
	return k.h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		t, err := tx.Turn(ctx, k.ref.WorkspaceID, k.ref.SessionID, k.ref.TurnID)
		if err != nil {
			return err
		}
		if phaseRank(phase) <= phaseRank(t.Phase) {
			return nil // never move a Turn back
		}
		t.Phase, t.UpdatedAt = phase, k.h.nowUTC()
		emit(turnFact(t))
		return tx.UpdateTurn(ctx, t)
	})
}

// Accepted binds canonical turn id to the exact provider identity in one
// transaction, accepts the submit claim and reveals a provisional session.
func (k *turnSink) Accepted(ctx context.Context, providerSessionID, providerTurnID string) error {
	if providerSessionID == "" || providerTurnID == "" {
		return Errorf(CodeInternal, "acceptance without a provider identity")
	}
	var cancelAfter bool
	err := k.h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		if err := k.h.checkOwner(ctx, tx, k.ref.WorkspaceID, k.ref.SessionID); err != nil {
			return err // fenced: another replica took the session over
		}
		t, err := tx.Turn(ctx, k.ref.WorkspaceID, k.ref.SessionID, k.ref.TurnID)
		if err != nil {
			return err
		}
		if t.Settled() {
			return errTurnSettled
		}
		t.Phase, t.UpdatedAt = PhaseDurablyAccepted, k.h.nowUTC()
		t.ProviderSessionID, t.ProviderTurnID = providerSessionID, providerTurnID
		// The agent that accepted the prompt is the one that runs it (its
		// version is known once it has introduced itself).
		agent := k.h.runtime.Describe()
		t.Agent = &agent
		if err := tx.UpdateTurn(ctx, t); err != nil {
			return err
		}
		c, err := tx.Claim(ctx, t.WorkspaceID, t.ClientSubmitID)
		if err != nil {
			return err
		}
		c.State, c.UpdatedAt = ClaimAccepted, t.UpdatedAt
		if err := tx.UpdateClaim(ctx, c); err != nil {
			return err
		}
		s, err := tx.Session(ctx, t.WorkspaceID, t.SessionID)
		if err != nil {
			return err
		}
		if s.Provisional {
			s.Provisional = false
			s.UpdatedAt = t.UpdatedAt
			if err := tx.UpdateSession(ctx, s); err != nil {
				return err
			}
		}
		cancelAfter = t.CancelRequested
		emit(turnFact(t))
		return nil
	})
	if err != nil {
		k.mu.Lock()
		k.acceptFailed = true
		k.mu.Unlock()
		return err
	}
	if cancelAfter { // a cancel arrived while the barrier was open
		go func() {
			if _, err := k.h.runtime.Cancel(context.WithoutCancel(ctx), k.ref); err != nil {
				k.h.log.Warn("deferred cancel failed", "turn", k.ref.TurnID, "err", err)
			}
		}()
	}
	return nil
}

// Output appends agent output to the Turn's message for ev.Key.
func (k *turnSink) Output(ctx context.Context, ev OutputEvent) error {
	if ev.Key == "" {
		return Errorf(CodeInternal, "output without a message key")
	}
	err := k.h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		if err := k.h.checkOwner(ctx, tx, k.ref.WorkspaceID, k.ref.SessionID); err != nil {
			return err // fenced: another replica took the session over
		}
		t, err := tx.Turn(ctx, k.ref.WorkspaceID, k.ref.SessionID, k.ref.TurnID)
		if err != nil {
			return err
		}
		if t.Settled() {
			return errTurnSettled
		}
		if t.Phase != PhaseDurablyAccepted {
			return errNotAccepted
		}
		s, err := tx.Session(ctx, t.WorkspaceID, t.SessionID)
		if err != nil {
			return err
		}
		now := k.h.nowUTC()
		s.MessageVersion++
		id := t.ID + "." + ev.Key
		m, err := tx.Message(ctx, t.WorkspaceID, t.SessionID, id)
		switch {
		case errors.Is(err, ErrNotFound):
			kind := ev.Kind
			if kind == "" {
				kind = KindText
			}
			m = Message{WorkspaceID: t.WorkspaceID, SessionID: t.SessionID, ID: id, TurnID: t.ID,
				Role: RoleAgent, Kind: kind, Ordinal: s.MessageVersion, Streaming: true, CreatedAt: now}
		case err != nil:
			return err
		}
		m.Content.Text += ev.Text
		if ev.Tool != nil {
			tool := *ev.Tool
			m.Tool = &tool
		}
		if ev.Done {
			m.Streaming = false
		}
		m.Version, m.UpdatedAt = s.MessageVersion, now
		if err := tx.PutMessage(ctx, m); err != nil {
			return err
		}
		s.UpdatedAt = now
		if err := tx.UpdateSession(ctx, s); err != nil {
			return err
		}
		emit(Fact{WorkspaceID: s.WorkspaceID, Kind: FactTranscriptAdvanced, SessionID: s.ID, Version: s.MessageVersion})
		return nil
	})
	if err == nil {
		k.mu.Lock()
		k.open[ev.Key] = !ev.Done
		k.mu.Unlock()
	}
	return err
}

// Terminal settles the Turn from the provider's report. A lost provider
// state settles as failed/execution_status_unknown, never as a guess.
func (k *turnSink) Terminal(ctx context.Context, term Terminal) error {
	if term.StateLost {
		term = Terminal{Outcome: OutcomeFailed, Reason: ReasonExecutionStatusUnknown, StopReason: term.StopReason}
	}
	k.mu.Lock()
	var keys []string
	for key, open := range k.open {
		if open {
			keys = append(keys, key)
		}
	}
	k.mu.Unlock()
	_, err := k.h.settleWith(ctx, k.ref, term, "", keys)
	return err
}
