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
	// accepted: this sink saw the barrier pass (or the Turn was born
	// accepted), so output may be queued; the store still decides.
	accepted bool
	// acceptedAs is the Turn as this sink's acceptance committed it
	// (settled when the terminal went with it); ID empty before.
	acceptedAs Turn
	// open holds message keys still streaming, closed at the terminal.
	open map[string]bool
	// phase is the latest pre-acceptance phase reported; set once
	// dispatched is durable (see Observed).
	phase TurnPhase
	// wrote is the Turn and session as this sink's acceptance or last
	// output commit left them (valid set): the next output commit checks
	// them instead of reading them (load, fenceOutput).
	wrote struct {
		valid bool
		t     Turn
		s     Session
		lens  openLens // its open messages' lengths (nil: not known)
	}

	out outputQueue
}

func newTurnSink(h *Host, ref TurnRef, accepted bool) *turnSink {
	return &turnSink{h: h, ref: ref, accepted: accepted, open: map[string]bool{}}
}

// fence is what a sink write requires of its Turn.
type fence int

const (
	fenceUnsettled fence = iota // any phase before settled
	fenceAccepted               // durably accepted and not settled
	fenceBound                  // provider identity bound, settled or not
	// fenceOutput is fenceAccepted for an output commit: after this
	// sink's acceptance, the rows are checked to be as its last commit
	// left them (Tx.ExpectOutput) rather than read, which saves a round
	// trip on PostgreSQL; the caller falls back to fenceAccepted on
	// ErrNotFound.
	fenceOutput
)

// load is the one fenced read every sink write starts with, inside tx:
// this replica still owns the session (fencedTurn), the Turn is not
// settled and, with fenceAccepted, its provider identity is durably bound;
// fenceBound asks only the binding. It returns the Turn (also with
// errTurnSettled, so settle can answer with it) and its session, locked on
// PostgreSQL.
func (k *turnSink) load(ctx context.Context, tx Tx, f fence) (Turn, Session, error) {
	if f == fenceOutput {
		k.mu.Lock()
		w := k.wrote
		k.mu.Unlock()
		if w.valid {
			if err := k.h.checkOwner(ctx, tx, k.ref.WorkspaceID, k.ref.SessionID); err != nil {
				return Turn{}, Session{}, err
			}
			return w.t, w.s, tx.ExpectOutput(ctx, k.ref.WorkspaceID, k.ref.SessionID, k.ref.TurnID, w.t.AppliedSeq, w.s.MessageVersion)
		}
		f = fenceAccepted
	}
	t, err := k.h.fencedTurn(ctx, tx, k.ref)
	if err != nil {
		return Turn{}, Session{}, err
	}
	switch {
	case f == fenceBound:
		if !t.Accepted() {
			return t, Session{}, errNotAccepted
		}
	case t.Settled():
		return t, Session{}, errTurnSettled
	case f == fenceAccepted && t.Phase != PhaseDurablyAccepted:
		return t, Session{}, errNotAccepted
	}
	s, err := tx.Session(ctx, t.WorkspaceID, t.SessionID)
	return t, s, err
}

// Observed records progress before acceptance. The Host writes dispatched
// itself before the runtime sees the prompt. The later phases
// (provider_observed, resolving_identity) change no recovery decision: an
// unsettled dispatched Turn is settled failed/execution_status_unknown
// whatever its phase, and the acceptance commit supersedes them. So they
// are kept in the sink, not flushed on their own: two WAL flushes fewer per
// submit.
func (k *turnSink) Observed(ctx context.Context, phase TurnPhase) error {
	if phaseRank(phase) < phaseRank(PhaseDispatched) || phaseRank(phase) >= phaseRank(PhaseDurablyAccepted) {
		return Errorf(CodeInternal, "runtime reported phase %q through Observed", phase)
	}
	k.mu.Lock()
	known := k.phase
	if phaseRank(phase) > phaseRank(known) && known != "" {
		k.phase = phase
	}
	k.mu.Unlock()
	if known != "" {
		return nil // dispatched is durable already
	}
	err := k.h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		t, _, err := k.load(ctx, tx, fenceUnsettled)
		if err != nil {
			return err
		}
		if phaseRank(PhaseDispatched) <= phaseRank(t.Phase) {
			return nil // never move a Turn back
		}
		t.Phase, t.UpdatedAt = PhaseDispatched, k.h.nowUTC()
		emit(turnFact(t))
		return tx.UpdateTurn(ctx, t)
	})
	if errors.Is(err, errTurnSettled) {
		return nil // a late report for a Turn that already ended
	}
	if err == nil {
		k.mu.Lock()
		k.phase = phase
		k.mu.Unlock()
	}
	return err
}

// Accepted binds canonical turn id to the exact provider identity in one
// transaction, accepts the submit claim and reveals a provisional session.
// The output held at the barrier commits in the same transaction, and so
// does the settlement when the runtime already has the terminal: one
// commit where there were two or three. What arrives while the Turn's
// fenced load is in flight joins them (Acceptance.More): an answer that
// ends within that round trip settles here too.
func (k *turnSink) Accepted(ctx context.Context, a Acceptance) error {
	if a.ProviderSessionID == "" || a.ProviderTurnID == "" {
		return Errorf(CodeInternal, "acceptance without a provider identity")
	}
	var term *Terminal
	if a.Terminal != nil {
		known := knownOutcome(*a.Terminal)
		term = &known
	}
	var (
		cancelAfter bool
		written     Turn    // the Turn as this commit leaves it
		wroteS      Session // and the session, when the Turn stays open
		lens        openLens
	)
	err := k.h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		if term != nil || a.More != nil {
			// The answer may end here (only More can bring its end later):
			// the settlement's reads go with the Turn's, even if nothing
			// more arrives (one cheap read).
			tx.SettleAhead(ctx, k.ref.WorkspaceID, k.ref.SessionID, k.ref.TurnID)
		}
		t, s, err := k.load(ctx, tx, fenceUnsettled)
		// A retry after an ambiguous commit finds the identity bound and
		// the held output applied (sequence numbers): it writes nothing.
		// With the terminal, it finds the Turn settled.
		retry := t.Accepted() && t.ProviderSessionID == a.ProviderSessionID && t.ProviderTurnID == a.ProviderTurnID
		if errors.Is(err, errTurnSettled) && retry && term != nil {
			written = t
			return nil
		}
		if err != nil {
			return err
		}
		if a.More != nil && term == nil {
			more, end := a.More()
			a.Output = append(a.Output, more...)
			if end != nil {
				known := knownOutcome(*end)
				term = &known
			}
		}
		turnDirty, sessDirty := false, false
		if !retry {
			if err := k.bind(ctx, tx, &t, &s, a); err != nil {
				return err
			}
			turnDirty, sessDirty = true, s.Provisional
			s.Provisional = false
		}
		if len(a.Output) > 0 {
			var applied bool
			applied, lens, err = k.applyOutput(ctx, tx, emit, &t, &s, a.Output, nil)
			if err != nil {
				return err
			}
			turnDirty, sessDirty = turnDirty || applied, sessDirty || applied
		}
		if !retry {
			// After the held output's delta: a watcher applying the
			// typed Turn has the messages its session carries.
			emit(turnFact(t))
		}
		cancelAfter = t.CancelRequested
		written = t
		if term != nil { // settleIn writes the Turn and the session
			written, err = k.h.settleIn(ctx, tx, emit, t, s, *term, "", k.openKeys(a.Output...))
			return err
		}
		wroteS = s
		if turnDirty {
			if err := tx.UpdateTurn(ctx, t); err != nil {
				return err
			}
		}
		if sessDirty {
			return tx.UpdateSession(ctx, s)
		}
		return nil
	})
	k.mu.Lock()
	k.acceptFailed = err != nil
	k.accepted = err == nil
	if err == nil {
		k.acceptedAs = written
		// The first output commit checks what this one left (load,
		// fenceOutput) instead of reading it.
		k.wrote.valid, k.wrote.t, k.wrote.s, k.wrote.lens = term == nil, written, wroteS, lens
	}
	k.mu.Unlock()
	if err != nil {
		return err
	}
	k.opened(a.Output)
	if term != nil {
		k.ended(written) // the Turn is over
		return nil
	}
	if cancelAfter { // a cancel arrived while the barrier was open
		// Not confirmed here means the reconciler delivers it again.
		go k.h.deliverCancel(context.WithoutCancel(ctx), k.ref)
	}
	return nil
}

// acceptedTurn is the Turn as this sink's acceptance committed it; false
// before the acceptance committed here.
func (k *turnSink) acceptedTurn() (Turn, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.acceptedAs, k.acceptedAs.ID != ""
}

// knownOutcome is what the Host records for a terminal: a lost provider
// state settles as failed/execution_status_unknown, never as a guess.
func knownOutcome(term Terminal) Terminal {
	if term.StateLost {
		return Terminal{Outcome: OutcomeFailed, Reason: ReasonExecutionStatusUnknown, StopReason: term.StopReason}
	}
	return term
}

// bind moves t to durably_accepted with the provider identity of a and
// accepts its submit claim, in tx; the caller writes t (and s, whose
// provisional flag the acceptance clears).
func (k *turnSink) bind(ctx context.Context, tx Tx, t *Turn, s *Session, a Acceptance) error {
	t.Phase, t.UpdatedAt = PhaseDurablyAccepted, k.h.nowUTC()
	t.ProviderSessionID, t.ProviderTurnID = a.ProviderSessionID, a.ProviderTurnID
	// The agent that accepted the prompt is the one that runs it (its
	// version is known once it has introduced itself).
	agent := k.h.runtime.Describe()
	t.Agent = &agent
	if err := tx.SetClaimState(ctx, t.WorkspaceID, t.ClientSubmitID, ClaimAccepted, t.UpdatedAt); err != nil {
		return err
	}
	if s.Provisional {
		s.UpdatedAt = t.UpdatedAt
	}
	return nil
}

// Terminal settles the Turn from the provider's report, committing the
// output still queued in the same transaction (one WAL flush fewer per
// turn; order and idempotency hold: the batch goes before the settlement
// and applied_seq guards it). A lost provider state settles as
// failed/execution_status_unknown, never as a guess.
func (k *turnSink) Terminal(ctx context.Context, term Terminal) error {
	term = knownOutcome(term)
	last, ok := k.finalBatch(ctx)
	if ok {
		out, err := k.settleWithOutput(ctx, term, last)
		k.endFinal()
		if err == nil {
			k.ended(out)
			return nil
		}
		if errors.Is(err, context.Canceled) {
			return err
		}
		// Retry the two steps apart: each classifies its own failure
		// (the output retries transient errors, the settlement pends the
		// terminal for the reconciler), and after an ambiguous commit of
		// the joint transaction both find the Turn settled.
	}
	// Output refused for good is reported already and must not keep the
	// Turn open: the runtime forgets a Turn after its terminal, so a
	// terminal returned with that refusal would never come again.
	if err := k.flushFirst(ctx); err != nil {
		return err
	}
	out, err := k.settleWithOutput(ctx, term, nil)
	k.h.afterSettle(k.ref, out, err)
	if err != nil {
		// The runtime forgets the Turn after its terminal: keep the
		// terminal for the reconciler, which retries the write.
		k.h.work.pend(k.ref.TurnID, term, "")
	}
	k.h.work.release(k.ref.TurnID)
	return err
}

// ended is what follows a committed settlement of this sink's Turn: the
// Host's after-settle work, then the drive claim is released.
func (k *turnSink) ended(t Turn) {
	k.h.afterSettle(k.ref, t, nil)
	k.h.work.release(k.ref.TurnID)
}

// settleWithOutput commits batch (the output still queued, possibly none)
// and the settlement in one fenced transaction, then drops the batch from
// the queue.
func (k *turnSink) settleWithOutput(ctx context.Context, term Terminal, batch []OutputEvent) (Turn, error) {
	var out Turn
	err := k.h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		tx.SettleAhead(ctx, k.ref.WorkspaceID, k.ref.SessionID, k.ref.TurnID) // with the Turn's read
		t, s, err := k.load(ctx, tx, fenceUnsettled)
		if errors.Is(err, errTurnSettled) {
			out = t // settled already (or a retry after an ambiguous commit)
			return nil
		}
		if err != nil {
			return err
		}
		if len(batch) > 0 {
			// settleIn writes the Turn and the session.
			if _, _, err := k.applyOutput(ctx, tx, emit, &t, &s, batch, nil); err != nil {
				return err
			}
		}
		out, err = k.h.settleIn(ctx, tx, emit, t, s, term, "", k.openKeys(batch...))
		return err
	})
	if err == nil {
		k.committed(batch)
	}
	return out, err
}

// openKeys lists the message keys still streaming after the committed
// output and then extra (not committed yet: the caller commits them in the
// same transaction).
func (k *turnSink) openKeys(extra ...OutputEvent) []string {
	k.mu.Lock()
	open := make(map[string]bool, len(k.open)+len(extra))
	for key, o := range k.open {
		open[key] = o
	}
	k.mu.Unlock()
	for _, ev := range extra {
		open[ev.Key] = !ev.Done
	}
	var keys []string
	for key, o := range open {
		if o {
			keys = append(keys, key)
		}
	}
	return keys
}
