package host

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"
)

// MaxDeleteBatch bounds one delete or purge command.
const MaxDeleteBatch = 100

// StopSessionDeleted is the stop reason of a Turn that was still live when
// its session was deleted. Its outcome stays honest: canceled only when it
// never reached the agent, otherwise failed/execution_status_unknown.
const StopSessionDeleted = "session_deleted"

// deleteCancelWait bounds how long the coordinator waits for a live Turn
// to settle through an ordinary cancel before it settles it itself.
const deleteCancelWait = 5 * time.Second

// maxDeletePlans bounds how often a delete replans a tree that keeps
// changing under it.
const maxDeletePlans = 8

// DeleteSessionsInput deletes sessions recoverably (with their sub-agent
// descendants).
type DeleteSessionsInput struct {
	WorkspaceID string
	SessionIDs  []string
	// By is the deleting principal's user id; ByName its display name.
	By, ByName string
}

// DeletedComponent is one connected group of sessions a delete tombstoned
// together; it is restored or purged as a whole.
type DeletedComponent struct {
	RootSessionID string
	Generation    string
	SessionIDs    []string
	Restorable    bool
}

// DeleteSessionsResult reports the committed delete. Deleting an already
// deleted session is a successful no-op: the arrays are empty. (An id the
// workspace has no row for at all is not_found, so a foreign id is never
// answered differently from a missing one.)
// CleanupFailures lists sessions whose live runtime could not be released
// after the commit: the delete stands, the runtime is released later.
type DeleteSessionsResult struct {
	DeletedSessionIDs []string
	Components        []DeletedComponent
	CleanupFailures   []string
}

// ErrSessionTreeChanged: the store resolved a different closure inside
// the write transaction than the plan; nothing was written and the delete
// is replanned.
var ErrSessionTreeChanged = errors.New("session tree changed during delete")

var errReplan = ErrSessionTreeChanged

// ReasonDeletionRejected: the deletion guard refused the closure.
const ReasonDeletionRejected = "deletion_rejected"

// treePlan is the exact closure of one execution tree a delete covers.
type treePlan struct {
	root    string
	closure []TreeSession // sorted by id
	key     string        // what the transaction must find again
}

// planTree computes the closure of the requested live sessions of one
// tree: each of them and every descendant, live or tombstoned. Descendant
// tombstones are absorbed into the new component.
func planTree(root string, tree []TreeSession, requested map[string]bool) treePlan {
	children := map[string][]string{}
	byID := map[string]TreeSession{}
	for _, ts := range tree {
		byID[ts.Session.ID] = ts
		if ts.Session.ParentID != "" {
			children[ts.Session.ParentID] = append(children[ts.Session.ParentID], ts.Session.ID)
		}
	}
	in := map[string]bool{}
	var queue []string
	for _, ts := range tree {
		s := ts.Session
		if requested[s.ID] && !s.Provisional && ts.Tombstone == nil {
			in[s.ID] = true
			queue = append(queue, s.ID)
		}
	}
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		for _, c := range children[id] {
			if !in[c] {
				in[c] = true
				queue = append(queue, c)
			}
		}
	}
	p := treePlan{root: root}
	var key strings.Builder
	for _, ts := range tree { // tree is in id order
		if !in[ts.Session.ID] {
			continue
		}
		p.closure = append(p.closure, ts)
		key.WriteString(ts.Session.ID)
		if ts.Tombstone != nil {
			key.WriteString("|" + ts.Tombstone.Generation)
		}
		key.WriteString("|" + ts.Session.ParentID + "\n")
	}
	p.key = key.String()
	return p
}

// components groups a closure by connectivity inside it: a session's
// component is its topmost ancestor that is still in the closure. So two
// sibling subtrees deleted in one batch stay independently restorable.
func (p treePlan) components() map[string][]TreeSession {
	byID := map[string]TreeSession{}
	for _, ts := range p.closure {
		byID[ts.Session.ID] = ts
	}
	out := map[string][]TreeSession{}
	for _, ts := range p.closure {
		top := ts.Session
		for {
			parent, ok := byID[top.ParentID]
			if top.ParentID == "" || !ok {
				break
			}
			top = parent.Session
		}
		out[top.ID] = append(out[top.ID], ts)
	}
	return out
}

// DeleteSessions is the deletion coordinator: it resolves the complete
// root/child closure of the requested sessions, takes their session locks
// in a stable order, ends every live Turn in the closure, and commits the
// tombstones only if the store resolves the same closure inside the write
// transaction; a changed tree is replanned. After the commit it releases
// the live runtimes (the provider session is kept so a restored session
// can resume it).
func (h *Host) DeleteSessions(ctx context.Context, in DeleteSessionsInput) (DeleteSessionsResult, error) {
	if err := requireIDs(in.WorkspaceID); err != nil {
		return DeleteSessionsResult{}, err
	}
	if len(in.SessionIDs) == 0 || len(in.SessionIDs) > MaxDeleteBatch {
		return DeleteSessionsResult{}, Errorf(CodeInvalidInput, "give 1 to %d session ids", MaxDeleteBatch)
	}
	if err := requireIDs(in.SessionIDs...); err != nil {
		return DeleteSessionsResult{}, err
	}
	requested := map[string]bool{}
	for _, id := range in.SessionIDs {
		requested[id] = true
	}
	// What the pre-cancel commits changed, over every attempt: a delete
	// that fails for good undoes it (rollbackQuiesce).
	q := &quiesced{}
	for attempt := 1; ; attempt++ {
		res, err := h.deleteOnce(ctx, in, requested, q, attempt >= maxDeletePlans)
		if !errors.Is(err, errReplan) {
			return res, err
		}
		h.log.Info("session tree changed during delete; replanning", "attempt", attempt)
		if attempt >= maxDeletePlans {
			return DeleteSessionsResult{}, &Error{Code: CodeUnavailable, Reason: "tree_changing",
				Message: "the sessions kept changing while they were being deleted; retry"}
		}
	}
}

// plan reads the closures of every tree the request touches.
func (h *Host) planDelete(ctx context.Context, ws string, requested map[string]bool) ([]treePlan, error) {
	roots := map[string]bool{}
	for _, id := range slices.Sorted(maps.Keys(requested)) {
		s, err := h.store.GetSession(ctx, ws, id)
		if errors.Is(err, ErrNotFound) || err == nil && s.Provisional {
			// An id this workspace never had (or another workspace's) is
			// not found, and nothing is deleted; an already deleted one is
			// a no-op below.
			return nil, Errorf(CodeNotFound, "session %s not found", id)
		}
		if err != nil {
			return nil, storeErr(err, "session %s", id)
		}
		if visible(s) {
			roots[rootOf(s)] = true
		}
	}
	var plans []treePlan
	for _, root := range slices.Sorted(maps.Keys(roots)) {
		tree, err := h.store.SessionTree(ctx, ws, root)
		if err != nil {
			return nil, storeErr(err, "session tree %s", root)
		}
		if p := planTree(root, tree, requested); len(p.closure) > 0 {
			plans = append(plans, p)
		}
	}
	return plans, nil
}

func (h *Host) deleteOnce(ctx context.Context, in DeleteSessionsInput, requested map[string]bool, q *quiesced, last bool) (_ DeleteSessionsResult, err error) {
	res := DeleteSessionsResult{DeletedSessionIDs: []string{}, Components: []DeletedComponent{}}
	ws := in.WorkspaceID
	plans, perr := h.planDelete(ctx, ws, requested)
	if perr != nil || len(plans) == 0 {
		return res, perr
	}
	// Session locks in one stable order: no submit of this process can
	// admit a Turn into the closure while it is being closed.
	var live []Session
	var ids []string
	for _, p := range plans {
		for _, ts := range p.closure {
			ids = append(ids, ts.Session.ID)
			if ts.Tombstone == nil {
				live = append(live, ts.Session)
			}
		}
	}
	slices.Sort(ids)
	if h.guard != nil {
		if err := h.guard.AdmitDeletion(ctx, ws, slices.Clone(ids)); err != nil {
			var he *Error
			if errors.As(err, &he) {
				return res, he
			}
			return res, &Error{Code: CodeOperationConflict, Reason: ReasonDeletionRejected, Err: err,
				Message: "the delete was not admitted"}
		}
		defer func() { h.reportDeletion(ctx, ws, ids, err) }()
	}
	for _, id := range ids {
		defer h.locks.lock(ws, id)()
	}
	// A delete that fails for good (a replan is retried, unless it was the
	// last) undoes its pre-cancel commit, still under the session locks, so
	// it changes nothing visible but the turns it cancelled.
	defer func() {
		if err != nil && (last || !errors.Is(err, errReplan)) {
			h.rollbackQuiesce(context.WithoutCancel(ctx), ws, q)
		}
	}()
	// Before any turn is ended: hold every active goal and withdraw queued
	// input, so the cancel below can neither let the goal loop decide or
	// arm a turn nor hand off to a queued successor (either would start
	// work on a session being deleted).
	if err := h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		q.begin()
		return h.quiesceForDelete(ctx, tx, emit, ws, live, q)
	}); err != nil {
		q.abort()
		return res, storeErr(err, "delete sessions")
	}
	q.committed()
	pendingOps, pendingFences, err := h.pendingGoalWork(ctx, ws, live)
	if err != nil {
		return res, err
	}
	// End live work through the ordinary cancel path first (it reaches the
	// runtime's owner on whichever replica); what is still unsettled after
	// that is settled inside the tombstone transaction.
	for _, s := range live {
		if s.ActiveTurnID == "" {
			continue
		}
		if _, err := h.CancelTurn(ctx, CancelInput{WorkspaceID: ws, SessionID: s.ID, TurnID: s.ActiveTurnID,
			Wait: deleteCancelWait, By: in.By, ByName: in.ByName}); err != nil && CodeOf(err) != CodeNotFound {
			h.log.Warn("delete: cancel of a live turn failed; settling it with the delete", "session", s.ID, "err", err)
		}
	}
	unsettled, openKeys, err := h.unsettledIn(ctx, ws, live)
	if err != nil {
		return res, err
	}
	var settled []Turn
	now := h.nowUTC()
	err = h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		res = DeleteSessionsResult{DeletedSessionIDs: []string{}, Components: []DeletedComponent{}}
		settled = settled[:0]
		for _, p := range plans {
			tree, err := tx.SessionTree(ctx, ws, p.root)
			if err != nil {
				return err
			}
			if planTree(p.root, tree, requested).key != p.key {
				return errReplan
			}
		}
		// Again inside the write transaction: input queued since (through
		// another replica) is withdrawn before a settle could hand it off.
		if err := h.quiesceForDelete(ctx, tx, emit, ws, live, nil); err != nil {
			return err
		}
		if err := h.detachGoalWork(ctx, tx, pendingOps, pendingFences, now); err != nil {
			return err
		}
		for _, p := range plans {
			for _, ts := range p.closure {
				if ts.Tombstone != nil {
					continue // absorbed: its work was settled when it was deleted
				}
				turns := unsettled[ts.Session.ID]
				s, err := tx.Session(ctx, ws, ts.Session.ID)
				if err != nil {
					return err
				}
				if s.ActiveTurnID != "" && !slices.Contains(turns, s.ActiveTurnID) {
					turns = append(turns, s.ActiveTurnID)
				}
				for _, tid := range turns {
					t, err := tx.Turn(ctx, ws, s.ID, tid)
					if err != nil {
						return err
					}
					if t.Settled() {
						continue
					}
					if s, err = tx.Session(ctx, ws, s.ID); err != nil {
						return err
					}
					term := Terminal{Outcome: OutcomeFailed, Reason: ReasonExecutionStatusUnknown, StopReason: StopSessionDeleted}
					if t.Phase == PhaseQueued {
						term = Terminal{Outcome: OutcomeCanceled, StopReason: StopSessionDeleted} // never reached the agent
					}
					st, err := h.settleIn(ctx, tx, emit, t, s, term, "", openKeys[tid])
					if err != nil {
						return err
					}
					settled = append(settled, st)
				}
			}
			comps := p.components()
			for _, top := range slices.Sorted(maps.Keys(comps)) {
				members := comps[top]
				c := DeletedComponent{RootSessionID: top, Generation: h.newID("del"), Restorable: true}
				for _, ts := range members {
					c.SessionIDs = append(c.SessionIDs, ts.Session.ID)
					// A legacy (lossy) tombstone is never upgraded: the
					// component stays deletable but not restorable.
					if ts.Tombstone != nil && !ts.Tombstone.Restorable {
						c.Restorable = false
					}
					emit(Fact{WorkspaceID: ws, Kind: FactSessionChanged, SessionID: ts.Session.ID})
				}
				tb := &Tombstone{DeletedAt: now, Generation: c.Generation, ComponentRoot: top,
					DeletedBy: in.By, DeletedByName: in.ByName, Restorable: c.Restorable}
				if err := tx.SetTombstone(ctx, ws, c.SessionIDs, tb); err != nil {
					return err
				}
				res.Components = append(res.Components, c)
				res.DeletedSessionIDs = append(res.DeletedSessionIDs, c.SessionIDs...)
			}
			// The execution tree changed: all-turns wake for its root.
			emit(Fact{WorkspaceID: ws, Kind: FactInteractionTreeDirty, SessionID: p.root})
		}
		if len(res.DeletedSessionIDs) > 0 {
			emit(trashFact(ws, TrashChange{Deleted: slices.Clone(res.DeletedSessionIDs)}))
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, errReplan) {
			return res, err
		}
		return DeleteSessionsResult{}, storeErr(err, "delete sessions")
	}
	for _, t := range settled {
		h.afterSettle(TurnRef{WorkspaceID: ws, SessionID: t.SessionID, TurnID: t.ID}, t, nil)
	}
	// Post-commit runtime cleanup: reported, never a delete failure; the
	// reconciler retries what failed (release_retry.go).
	for _, s := range live {
		if err := h.releaseRuntime(context.WithoutCancel(ctx), ws, s.ID); err != nil {
			h.log.Warn("delete: release of a deleted session's runtime failed; retrying in the background", "session", s.ID, "err", err)
			res.CleanupFailures = append(res.CleanupFailures, s.ID)
			h.releases.add(h.now(), ws, s.ID)
		}
	}
	return res, nil
}

// reportDeletion tells the guard how an admitted attempt ended; a panic
// in the guard is contained, so reporting never changes the result.
func (h *Host) reportDeletion(ctx context.Context, ws string, ids []string, err error) {
	defer func() {
		if p := recover(); p != nil {
			h.log.Error("deletion guard report panicked", "panic", p)
		}
	}()
	h.guard.DeletionAttempt(context.WithoutCancel(ctx), ws, slices.Clone(ids), err)
}

// unsettledIn lists the unsettled Turns of the given sessions and the
// message keys each still streams, read before the tombstone transaction.
func (h *Host) unsettledIn(ctx context.Context, ws string, sessions []Session) (map[string][]string, map[string][]string, error) {
	byTurn, keys := map[string][]string{}, map[string][]string{}
	if len(sessions) == 0 {
		return byTurn, keys, nil
	}
	want := map[string]bool{}
	for _, s := range sessions {
		want[s.ID] = true
	}
	turns, _, err := h.store.UnsettledTurns(ctx)
	if err != nil {
		return nil, nil, storeErr(err, "unsettled turns")
	}
	for _, t := range turns {
		if t.WorkspaceID != ws || !want[t.SessionID] {
			continue
		}
		byTurn[t.SessionID] = append(byTurn[t.SessionID], t.ID)
		k, err := h.streamingKeys(ctx, TurnRef{WorkspaceID: ws, SessionID: t.SessionID, TurnID: t.ID})
		if err != nil {
			return nil, nil, storeErr(err, "messages of turn %s", t.ID)
		}
		keys[t.ID] = k
	}
	return byTurn, keys, nil
}

// releaseRuntime drops the live runtime binding of a deleted session
// wherever it runs, and this replica's lease on it. The provider session
// is kept (Release, not Destroy): a restore may resume it.
func (h *Host) releaseRuntime(ctx context.Context, ws, sid string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ls := h.leases()
	if ls == nil {
		return h.runtime.Release(ctx, ws, sid)
	}
	l, err := ls.GetLease(ctx, ws, sid)
	switch {
	case errors.Is(err, ErrNotFound):
		return h.runtime.Release(ctx, ws, sid)
	case err != nil:
		return err
	case l.Live && l.Owner != h.epoch && !isForwarded(ctx):
		var out struct{}
		return h.forward(ctx, l.Owner, forwardRelease, releaseInput{WorkspaceID: ws, SessionID: sid}, &out)
	}
	err = h.runtime.Release(ctx, ws, sid)
	if gen, held := h.own.generation(ws, sid); held {
		if rerr := ls.ReleaseLease(ctx, ws, sid, h.epoch, gen); rerr != nil && err == nil {
			err = rerr
		}
		h.own.drop(ws, sid, gen)
	}
	return err
}

// releaseInput is the forwarded request to release a deleted session's
// runtime on the replica that owns it.
type releaseInput struct {
	WorkspaceID string
	SessionID   string
}

// serveRelease runs a forwarded release: only for a session that is
// deleted, so a forged request cannot stop a live session's agent.
func (h *Host) serveRelease(ctx context.Context, in releaseInput) (struct{}, error) {
	s, err := h.store.GetSession(ctx, in.WorkspaceID, in.SessionID)
	if errors.Is(err, ErrNotFound) {
		return struct{}{}, nil
	}
	if err != nil {
		return struct{}{}, storeErr(err, "session %s", in.SessionID)
	}
	if s.DeletedAt == nil {
		return struct{}{}, Errorf(CodeOperationConflict, "session %s is not deleted", in.SessionID)
	}
	return struct{}{}, h.releaseRuntime(ctx, in.WorkspaceID, in.SessionID)
}

// Goal and queue handling of the deletion coordinator (seed: "Stable Goal
// and effective-history state is left byte-for-byte unchanged. A pending
// Goal operation is failed and detached from the state").

// deletedByHost is the principal recorded on what a delete ends on its own:
// queued input it withdraws, goal operations it fails, the goal identity
// it holds.
const deletedByHost = "ensemble:session_deleted"

// quiesceForDelete withdraws the queued (not yet delivered) input of the
// live sessions about to be deleted, and holds each active goal: a done
// fence on its exact identity, so the loop neither decides the turn the
// delete cancels nor arms another, while the goal's bytes stay as they
// are. Both are idempotent, so a replanned delete repeats them harmlessly.
// q, when set, records what this commit changed.
func (h *Host) quiesceForDelete(ctx context.Context, tx Tx, emit func(...Fact), ws string, live []Session, qs *quiesced) error {
	now := h.nowUTC()
	for _, s := range live {
		q, err := tx.Queue(ctx, ws, s.ID)
		if err != nil {
			return err
		}
		rev := int64(0)
		for _, e := range q.Entries {
			e.State, e.RetractedBy, e.UpdatedAt = QueueRetracted, deletedByHost, now
			if e, err = tx.UpdateQueueEntry(ctx, e); err != nil {
				return err
			}
			rev = e.Revision
			qs.retracted(e)
		}
		if rev != 0 {
			emit(queueFact(ws, s.ID, rev))
		}
		st, err := loadGoal(ctx, tx, ws, s.ID)
		if err != nil {
			return err
		}
		if held, err := goalHeld(ctx, tx, st); err != nil || held || st.Goal == nil || st.Goal.Status != GoalActive {
			continue
		}
		f := GoalFence{WorkspaceID: ws, SessionID: s.ID, OperationID: st.Goal.OperationID,
			Revision: st.Goal.Revision, ByOperation: deletedByHost, State: GoalFenceDone, CreatedAt: now, UpdatedAt: now}
		if err := tx.InsertGoalFence(ctx, f); errors.Is(err, ErrDuplicate) {
			continue // held already (by an earlier attempt, which recorded it)
		} else if err != nil {
			return err
		}
		qs.held(f)
		// The record is unchanged (same Seq) but now held: watchers learn
		// it from this fact, committed with the fence that holds it.
		cp := st
		cp.Held = true
		emit(Fact{WorkspaceID: ws, Kind: FactGoalState, SessionID: s.ID, Version: st.Seq, Goal: &cp})
	}
	return nil
}

// quiesced is what the pre-cancel commits of one delete changed: the
// queue entries they retracted and the holds they placed. The commit
// closure may run more than once; only its committed run is kept.
type quiesced struct {
	entries, pendEntries []QueueEntry
	holds, pendHolds     []GoalFence
}

func (q *quiesced) begin() { q.pendEntries, q.pendHolds = nil, nil }

// abort drops the last run: its commit failed, so it changed nothing.
func (q *quiesced) abort() { q.begin() }

func (q *quiesced) retracted(e QueueEntry) {
	if q != nil {
		q.pendEntries = append(q.pendEntries, e)
	}
}

func (q *quiesced) held(f GoalFence) {
	if q != nil {
		q.pendHolds = append(q.pendHolds, f)
	}
}

// committed keeps the last run.
func (q *quiesced) committed() {
	q.entries = append(q.entries, q.pendEntries...)
	q.holds = append(q.holds, q.pendHolds...)
	q.begin()
}

// rollbackQuiesce undoes the pre-cancel commits of a delete that failed:
// the entries it withdrew wait again (those still retracted by it), its
// holds are lifted (the goal loop resumes the goal), and a session its
// cancel left idle admits the successor the withdrawn entries would have
// got at the terminal handoff. A failure here is logged: the session then
// stays as the pre-cancel commit left it (retracted entries, a held goal
// a resume lifts), never running work on a deleted session.
func (h *Host) rollbackQuiesce(ctx context.Context, ws string, q *quiesced) {
	if len(q.entries) == 0 && len(q.holds) == 0 {
		return
	}
	var succ []TurnRef
	err := h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
		succ = succ[:0]
		sessions := map[string]bool{}
		for _, f := range q.holds {
			if err := tx.DeleteGoalFence(ctx, f.WorkspaceID, f.SessionID, f.OperationID, f.Revision, deletedByHost); err != nil && !errors.Is(err, ErrNotFound) {
				return err
			}
			sessions[f.SessionID] = true
		}
		revs := map[string]int64{}
		for _, e := range q.entries {
			cur, err := tx.QueueEntry(ctx, ws, e.SessionID, e.ID)
			if err != nil {
				return err
			}
			if cur.State != QueueRetracted || cur.RetractedBy != deletedByHost {
				continue
			}
			cur.State, cur.RetractedBy, cur.UpdatedAt = QueueQueued, "", h.nowUTC()
			if cur, err = tx.UpdateQueueEntry(ctx, cur); err != nil {
				return err
			}
			revs[e.SessionID] = cur.Revision
			sessions[e.SessionID] = true
		}
		for _, sid := range slices.Sorted(maps.Keys(sessions)) {
			s, err := tx.Session(ctx, ws, sid)
			if err != nil {
				return err
			}
			emit(Fact{WorkspaceID: ws, Kind: FactSessionChanged, SessionID: sid})
			if s.ActiveTurnID == "" && visible(s) && s.ParentID == "" {
				qu, err := tx.Queue(ctx, ws, sid)
				if err != nil {
					return err
				}
				if next := nextRun(qu); len(next) > 0 {
					t, err := h.admitQueuedIn(ctx, tx, emit, &s, next, h.nowUTC())
					if err != nil {
						return err
					}
					if err := tx.UpdateSession(ctx, s); err != nil {
						return err
					}
					for _, e := range next {
						e.State, e.TurnID, e.UpdatedAt = QueueStarted, t.ID, h.nowUTC()
						if e, err = tx.UpdateQueueEntry(ctx, e); err != nil {
							return err
						}
						revs[sid] = e.Revision
					}
					succ = append(succ, TurnRef{WorkspaceID: ws, SessionID: sid, TurnID: t.ID})
				}
			}
			if rev := revs[sid]; rev != 0 {
				emit(queueFact(ws, sid, rev))
			}
		}
		return nil
	})
	if err != nil {
		h.log.Error("delete failed and its pre-cancel commit could not be undone; the session keeps its goal held and its queue withdrawn", "err", err)
		return
	}
	q.entries, q.holds = nil, nil
	for _, ref := range succ {
		select {
		case h.queue.successors <- ref:
		default: // full: the reconciler dispatches it
		}
	}
}

// pendingGoalWork lists the accepted goal operations and pending fences of
// the live sessions being deleted (the store scans are process-wide).
func (h *Host) pendingGoalWork(ctx context.Context, ws string, live []Session) ([]GoalOperation, []GoalFence, error) {
	in := map[string]bool{}
	for _, s := range live {
		in[s.ID] = true
	}
	var ops []GoalOperation
	var fences []GoalFence
	if len(in) == 0 {
		return nil, nil, nil
	}
	// Undecodable operations are the goal loop's to quarantine.
	all, _, err := h.store.PendingGoalOperations(ctx)
	if err != nil {
		return nil, nil, storeErr(err, "pending goal operations")
	}
	for _, op := range all {
		if op.WorkspaceID == ws && in[op.SessionID] {
			ops = append(ops, op)
		}
	}
	fs, err := h.store.PendingGoalFences(ctx)
	if err != nil {
		return nil, nil, storeErr(err, "pending goal fences")
	}
	for _, f := range fs {
		if f.WorkspaceID == ws && in[f.SessionID] {
			fences = append(fences, f)
		}
	}
	return ops, fences, nil
}

// detachGoalWork, in the tombstone transaction, fails the goal operations
// still accepted on the deleted sessions and marks their pending fences
// done (the delete ended every live turn): neither is retried against a
// deleted session. The goal state itself is not touched.
func (h *Host) detachGoalWork(ctx context.Context, tx Tx, ops []GoalOperation, fences []GoalFence, now time.Time) error {
	for _, op := range ops {
		cur, err := tx.GoalOperation(ctx, op.WorkspaceID, op.ClientSubmitID)
		if err != nil {
			return err
		}
		if cur.State != GoalOpAccepted {
			continue
		}
		cur.State, cur.Error, cur.UpdatedAt = GoalOpFailed, StopSessionDeleted, now
		if err := tx.UpdateGoalOperation(ctx, cur); err != nil {
			return err
		}
	}
	for _, f := range fences {
		f.State, f.UpdatedAt = GoalFenceDone, now
		if err := tx.UpdateGoalFence(ctx, f); err != nil {
			return err
		}
	}
	return nil
}
