package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// Session fork: an independent root session through an inclusive fork
// point, a settled Turn of the source. The source's agent must attest it
// can fork there (Forker); nothing is ever chosen by index. The operation
// is durable: dispatching (target reserved) → committed | failed. A
// dispatching operation found by a retry is either still running in this
// process (unavailable, fork_in_progress) or its outcome is unknown
// (outcome_unknown, fork_delivery_unknown): it is never sent again.

// ForkSessionInput forks SessionID through TurnID.
type ForkSessionInput struct {
	WorkspaceID    string
	SessionID      string
	TurnID         string
	ClientSubmitID string
	By, ByName     string
}

// forkFlights are the fork operations this process is running.
var forkFlights sync.Map // "ws\x00clientSubmitId" → struct{}

func forkRefused(reason, msg string) *Error {
	return &Error{Code: CodeOperationConflict, Reason: reason, Message: msg}
}

// ForkCapability is what the runtime attests now, for display (never
// prepares anything).
func (h *Host) ForkCapability() (ForkMode, string) {
	if h.runtime == nil {
		return ForkNone, ReasonForkUnsupported
	}
	return h.runtime.ForkCapability()
}

// ForkSession runs the fork saga and returns the new session.
func (h *Host) ForkSession(ctx context.Context, in ForkSessionInput) (Session, error) {
	if err := requireIDs(in.WorkspaceID, in.SessionID, in.TurnID); err != nil {
		return Session{}, err
	}
	if err := requireClientID(in.ClientSubmitID); err != nil {
		return Session{}, err
	}
	if h.runtime == nil { // a read-only Host
		return Session{}, &Error{Code: CodeUnsupported, Reason: ReasonForkUnsupported, Message: "this agent cannot fork sessions"}
	}
	// The agent that holds the source's provider session forks it: a
	// session another replica runs is forked there.
	if !isForwarded(ctx) && h.runsElsewhere(ctx, in.WorkspaceID, in.SessionID) {
		owner, err := h.Owner(ctx, in.WorkspaceID, in.SessionID)
		if err != nil {
			return Session{}, err
		}
		var out Session
		if err := h.forward(ctx, owner, forwardFork, in, &out); err != nil {
			return Session{}, err
		}
		return out, nil
	}
	key := in.WorkspaceID + "\x00" + in.ClientSubmitID
	if _, busy := forkFlights.LoadOrStore(key, struct{}{}); busy {
		return Session{}, &Error{Code: CodeUnavailable, Reason: ReasonForkInProgress, Message: "this fork is still running; retry with the same clientSubmitId"}
	}
	defer forkFlights.Delete(key)

	// Freeze the snapshot before anything is reserved: a settled turn and
	// the turns before it never change, so a store failure here leaves
	// nothing behind and the same clientSubmitId can simply be retried.
	var snap Transcript
	if pt, err := h.store.GetTurn(ctx, in.WorkspaceID, in.SessionID, in.TurnID); err == nil && pt.Settled() {
		if snap, err = readTranscript(ctx, h.store, in.WorkspaceID, in.SessionID, pt.Seq); err != nil {
			return Session{}, storeErr(err, "session %s", in.SessionID)
		}
	} else if err != nil && !errors.Is(err, ErrNotFound) {
		return Session{}, storeErr(err, "turn %s", in.TurnID)
	}
	op, src, point, done, err := h.prepareFork(ctx, in)
	if err != nil || done != nil {
		if done != nil {
			return *done, nil
		}
		return Session{}, err
	}
	if len(snap.Turns) == 0 || snap.Turns[len(snap.Turns)-1].ID != point.ID {
		// The point was read unsettled (or not at all) but settled since.
		return Session{}, h.failFork(ctx, op, ReasonForkNotSettled)
	}
	var bound []string
	for _, t := range snap.Turns {
		if t.ProviderTurnID != "" && t.ProviderSessionID == point.ProviderSessionID {
			bound = append(bound, t.ProviderTurnID)
		}
	}
	res, err := h.runtime.Fork(ctx, ForkRequest{
		WorkspaceID: in.WorkspaceID, SourceSessionID: src.ID, TargetSessionID: op.TargetSessionID,
		ProviderSessionID: point.ProviderSessionID, ThroughProviderTurnID: point.ProviderTurnID,
		Latest: isLatest(src, point), ProviderTurnIDs: bound, Settings: src.Settings,
	})
	var le *LocalError
	switch {
	case errors.As(err, &le):
		return Session{}, h.failFork(ctx, op, le.Code)
	case err != nil:
		// The agent may or may not have forked: never ask again.
		h.log.Warn("fork: the agent's answer was lost; outcome unknown", "session", src.ID, "err", err)
		return Session{}, &Error{Code: CodeOutcomeUnknown, Reason: ReasonForkDeliveryUnknown, Err: err,
			Message: "the agent did not confirm the fork; it is not retried"}
	}
	for _, id := range bound {
		if res.TurnIDs[id] == "" {
			return Session{}, h.failFork(ctx, op, ReasonForkEvidence)
		}
	}
	if res.ProviderSessionID == "" {
		return Session{}, h.failFork(ctx, op, ReasonForkEvidence)
	}
	return h.commitFork(ctx, op, src, point, snap, res)
}

func isLatest(s Session, t Turn) bool { return s.TurnCount == t.Seq && s.ActiveTurnID == "" }

// prepareFork checks the fork point and the agent's attestation and
// reserves the target (operation dispatching). done is set when the
// clientSubmitId already committed.
func (h *Host) prepareFork(ctx context.Context, in ForkSessionInput) (op ForkOp, src Session, point Turn, done *Session, err error) {
	for attempt := 0; ; attempt++ {
		err = h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
			prev, err := tx.ForkOp(ctx, in.WorkspaceID, in.ClientSubmitID)
			if err == nil {
				return replayFork(prev, in)
			} else if !errors.Is(err, ErrNotFound) {
				return err
			}
			if src, err = visibleSession(ctx, tx, in.WorkspaceID, in.SessionID); err != nil {
				return err
			}
			if src.ParentID != "" {
				return forkRefused(ReasonForkSubagent, "a sub-agent session is forked through its parent")
			}
			if point, err = tx.Turn(ctx, in.WorkspaceID, in.SessionID, in.TurnID); err != nil {
				return storeErr(err, "turn %s", in.TurnID)
			}
			if !point.Settled() || point.Retracted {
				return forkRefused(ReasonForkNotSettled, "only a settled turn can be a fork point")
			}
			if point.ProviderTurnID == "" || point.ProviderSessionID == "" {
				return forkRefused(ReasonForkUnbound, "the agent never confirmed this turn, so it cannot fork through it")
			}
			mode, reason := h.runtime.ForkCapability()
			switch {
			case mode == ForkNone:
				return forkRefused(reason, "the agent cannot fork this session")
			case mode == ForkLatestTurn && !isLatest(src, point):
				return forkRefused(ReasonForkNotLatest, "this agent forks only through the latest settled turn")
			case mode == ForkLatestTurn && point.ProviderSessionID != src.ProviderSessionID:
				return forkRefused(ReasonForkProviderMismatch, "the turn ran in an agent session this session no longer uses")
			}
			lineage, base := src.ID, src.Title
			if lin, err := tx.SessionLineage(ctx, in.WorkspaceID, src.ID); err == nil {
				lineage, base = lin.LineageID, lin.BaseTitle
			} else if !errors.Is(err, ErrNotFound) {
				return err
			}
			if base == "" {
				base = "Untitled"
			}
			top, err := tx.MaxLineageSeq(ctx, in.WorkspaceID, lineage)
			if err != nil {
				return err
			}
			now := h.nowUTC()
			op = ForkOp{WorkspaceID: in.WorkspaceID, ClientSubmitID: in.ClientSubmitID, SourceSessionID: src.ID,
				SourceTurnID: point.ID, TargetSessionID: h.newID("ses"), LineageID: lineage,
				LineageSeq: max(top, 1) + 1, BaseTitle: base, State: ForkDispatching,
				CreatedBy: in.By, CreatedAt: now, UpdatedAt: now}
			return tx.InsertForkOp(ctx, op)
		})
		var d *forkDone
		if errors.As(err, &d) {
			s, gerr := h.store.GetSession(ctx, in.WorkspaceID, d.target)
			if gerr != nil {
				return op, src, point, nil, storeErr(gerr, "session %s", d.target)
			}
			return op, src, point, &s, nil
		}
		// Two forks of one family raced for the same title number: take
		// the next one.
		if errors.Is(err, ErrDuplicate) && attempt < 3 {
			continue
		}
		if err != nil {
			return op, src, point, nil, storeErr(err, "fork %s", in.SessionID)
		}
		return op, src, point, nil, nil
	}
}

// forkDone carries an already committed fork out of a transaction.
type forkDone struct{ target string }

func (d *forkDone) Error() string { return "fork already committed" }

// replayFork answers a clientSubmitId that was used before.
func replayFork(prev ForkOp, in ForkSessionInput) error {
	if prev.SourceSessionID != in.SessionID || prev.SourceTurnID != in.TurnID {
		return &Error{Code: CodeOperationConflict, Reason: "client_submit_id_reused",
			Message: "clientSubmitId was already used with a different request"}
	}
	switch prev.State {
	case ForkCommitted:
		return &forkDone{target: prev.TargetSessionID}
	case ForkFailed:
		return forkRefused(prev.Reason, "this fork was refused")
	}
	return &Error{Code: CodeOutcomeUnknown, Reason: ReasonForkDeliveryUnknown,
		Message: "an earlier attempt of this fork ended without an answer from the agent; it is not retried"}
}

// failFork records a refusal and returns it.
func (h *Host) failFork(ctx context.Context, op ForkOp, reason string) error {
	err := h.commit(ctx, func(tx Tx, _ func(...Fact)) error {
		cur, err := tx.ForkOp(ctx, op.WorkspaceID, op.ClientSubmitID)
		if err != nil || cur.State != ForkDispatching {
			return err
		}
		cur.State, cur.Reason, cur.UpdatedAt = ForkFailed, reason, h.nowUTC()
		return tx.UpdateForkOp(ctx, cur)
	})
	if err != nil {
		h.log.Warn("fork: could not record the refusal", "err", err)
	}
	return forkRefused(reason, "the agent could not attest this fork")
}

// commitFork materializes the frozen snapshot as the target session.
func (h *Host) commitFork(ctx context.Context, op ForkOp, src Session, point Turn, snap Transcript, res ForkResult) (Session, error) {
	now := h.nowUTC()
	target := Session{
		WorkspaceID: src.WorkspaceID, ID: op.TargetSessionID, RootID: op.TargetSessionID,
		Title: fmt.Sprintf("%s (%d)", op.BaseTitle, op.LineageSeq), TitleExplicit: true,
		Agent: src.Agent, Simulated: src.Simulated, Settings: src.Settings,
		ProviderSessionID: res.ProviderSessionID, TurnCount: point.Seq,
		CreatedBy: op.CreatedBy, CreatedAt: now, UpdatedAt: now,
	}
	turnIDs := make(map[string]string, len(snap.Turns))
	for _, t := range snap.Turns {
		turnIDs[t.ID] = h.newID("turn")
	}
	err := h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		cur, err := tx.ForkOp(ctx, op.WorkspaceID, op.ClientSubmitID)
		if err != nil {
			return err
		}
		if cur.State != ForkDispatching {
			return replayFork(cur, ForkSessionInput{SessionID: op.SourceSessionID, TurnID: op.SourceTurnID})
		}
		for _, m := range snap.Messages {
			target.MessageVersion = max(target.MessageVersion, m.Version)
		}
		if err := tx.InsertSession(ctx, target); err != nil {
			return err
		}
		for _, t := range snap.Turns {
			c := t
			c.SessionID, c.ID, c.ClientSubmitID = target.ID, turnIDs[t.ID], ""
			c.IdentityAnchorTurnID = turnIDs[t.IdentityAnchorTurnID]
			c.CancelRequested = false
			if t.ProviderSessionID == point.ProviderSessionID && t.ProviderTurnID != "" {
				c.ProviderSessionID, c.ProviderTurnID = res.ProviderSessionID, res.TurnIDs[t.ProviderTurnID]
			} else {
				// Not in the forked provider session: the fork holds it
				// as transcript only.
				c.ProviderSessionID, c.ProviderTurnID = "", ""
			}
			if err := tx.InsertTurn(ctx, c); err != nil {
				return err
			}
		}
		for _, m := range snap.Messages {
			c := m
			c.SessionID, c.ID, c.TurnID, c.Streaming = target.ID, h.newID("msg"), turnIDs[m.TurnID], false
			if err := tx.PutMessage(ctx, c); err != nil {
				return err
			}
		}
		for _, it := range snap.Interactions {
			c := it
			c.SessionID, c.RootSessionID, c.TurnID, c.OperationID = target.ID, target.ID, turnIDs[it.TurnID], ""
			if c.State == InteractionPending {
				c.State, c.UpdatedAt = InteractionSuperseded, now
			}
			if err := tx.InsertInteraction(ctx, c); err != nil {
				return err
			}
		}
		cur.State, cur.ProviderSessionID, cur.UpdatedAt = ForkCommitted, res.ProviderSessionID, now
		emit(Fact{WorkspaceID: target.WorkspaceID, Kind: FactSessionChanged, SessionID: target.ID})
		return tx.UpdateForkOp(ctx, cur)
	})
	var d *forkDone
	if errors.As(err, &d) {
		return h.store.GetSession(ctx, op.WorkspaceID, d.target)
	}
	if err != nil {
		return Session{}, storeErr(err, "fork %s", src.ID)
	}
	return h.store.GetSession(ctx, op.WorkspaceID, target.ID)
}

// Transcript is one session's canonical history through a Turn.
type Transcript struct {
	Turns        []Turn        // ascending seq
	Messages     []Message     // ascending version
	Interactions []Interaction // by (turn seq, created at, request id)
}

// readTranscript reads a session's turns with seq <= through (all when
// through is 0), their messages and interactions.
func readTranscript(ctx context.Context, st Store, ws, sid string, through int64) (Transcript, error) {
	var out Transcript
	var before int64
	for {
		p, err := st.ListTurns(ctx, ws, sid, TurnQuery{Before: before, Limit: 200})
		if err != nil {
			return out, err
		}
		for _, t := range p.Turns {
			if through == 0 || t.Seq <= through {
				out.Turns = append(out.Turns, t)
			}
		}
		if !p.HasMore || len(p.Turns) == 0 {
			break
		}
		before = p.Turns[len(p.Turns)-1].Seq
	}
	slices.SortFunc(out.Turns, func(a, b Turn) int { return int(a.Seq - b.Seq) })
	in := make(map[string]bool, len(out.Turns))
	var last int64
	for _, t := range out.Turns {
		in[t.ID] = true
		last = max(last, t.Seq)
	}
	var after int64
	for {
		p, err := st.ListMessages(ctx, ws, sid, MessageQuery{AfterVersion: after, Limit: 500})
		if err != nil {
			return out, err
		}
		for _, m := range p.Messages {
			if in[m.TurnID] {
				out.Messages = append(out.Messages, m)
			}
			after = max(after, m.Version)
		}
		if !p.HasMore || len(p.Messages) == 0 {
			break
		}
	}
	if last > 0 {
		its, err := st.SessionInteractions(ctx, ws, sid, 1, last)
		if err != nil {
			return out, err
		}
		out.Interactions = its
	}
	return out, nil
}
