package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// Deleted-session lifecycle: the deletion coordinator, recoverable
// tombstones, restore and bounded purge (seed 000).

// withSubagent adds a settled "/sim subagent" turn to root (answering the
// sub-agent's permission request) and returns the new child session.
func (f *fixture) withSubagent(rootID, submitID string) host.Session {
	f.t.Helper()
	tr := f.mustSend(rootID, submitID, "/sim subagent")
	_, it := f.pendingPermission(rootID)
	if _, err := f.respond(it, "allow", "alice", ""); err != nil {
		f.t.Fatalf("respond: %v", err)
	}
	f.waitSettled(tr)
	f.waitSettled(host.Turn{WorkspaceID: ws, SessionID: it.SessionID, ID: it.TurnID})
	// The answer's delivery result is recorded by the operation worker,
	// possibly after the turns settled: wait so the graph is quiescent.
	f.waitResolved(it.Ref())
	child, err := f.host.GetSession(ctx, ws, it.SessionID)
	if err != nil {
		f.t.Fatalf("child session: %v", err)
	}
	return child
}

// graphDump is every canonical row of one execution tree read through the
// store: sessions (with settings, title, pin, provider identity …), all
// turns, all messages, all interactions and the submit claims the turns
// name. Tombstone columns are left out: they are what delete and restore
// change.
type graphDump struct {
	Sessions []sessionRows `json:"sessions"`
}

type sessionRows struct {
	Session      host.Session       `json:"session"`
	Turns        []host.Turn        `json:"turns"`
	Messages     []host.Message     `json:"messages"`
	Interactions []host.Interaction `json:"interactions"`
	Claims       []host.SubmitClaim `json:"claims"`
	// Goal is the session's goal record (nil: none ever).
	Goal *host.GoalState `json:"goal"`
	// Queue is the session's queue (revision, fence, what waits) and
	// every entry that reached one of its turns; the revision moves with
	// any entry change, retracted ones included.
	Queue        host.Queue        `json:"queue"`
	QueueReached []host.QueueEntry `json:"queueReached"`
}

// dumpGraph serializes the tree rooted at rootID to canonical JSON bytes.
func (f *fixture) dumpGraph(rootID string) []byte {
	f.t.Helper()
	st := f.store
	tree, err := st.SessionTree(ctx, ws, rootID)
	if err != nil {
		f.t.Fatalf("session tree: %v", err)
	}
	var g graphDump
	for _, ts := range tree {
		s := ts.Session
		s.DeletedAt = nil
		rows := sessionRows{Session: s}
		for before := int64(0); ; {
			p, err := st.ListTurns(ctx, ws, s.ID, host.TurnQuery{Before: before, Limit: 200})
			if err != nil {
				f.t.Fatalf("turns: %v", err)
			}
			rows.Turns = append(rows.Turns, p.Turns...)
			if !p.HasMore {
				break
			}
			before = p.NextCursor
		}
		for after := int64(0); ; {
			p, err := st.ListMessages(ctx, ws, s.ID, host.MessageQuery{AfterVersion: after, Limit: 1000})
			if err != nil {
				f.t.Fatalf("messages: %v", err)
			}
			rows.Messages = append(rows.Messages, p.Messages...)
			if !p.HasMore || len(p.Messages) == 0 {
				break
			}
			after = p.Messages[len(p.Messages)-1].Version
		}
		if rows.Interactions, err = st.SessionInteractions(ctx, ws, s.ID, 0, 1<<40); err != nil {
			f.t.Fatalf("interactions: %v", err)
		}
		for _, t := range rows.Turns {
			if t.ClientSubmitID == "" {
				continue
			}
			c, err := st.GetClaim(ctx, ws, t.ClientSubmitID)
			if err != nil {
				f.t.Fatalf("claim %s: %v", t.ClientSubmitID, err)
			}
			rows.Claims = append(rows.Claims, c)
		}
		if gs, err := st.GetGoal(ctx, ws, s.ID); err == nil {
			rows.Goal = &gs
		} else if !errors.Is(err, host.ErrNotFound) {
			f.t.Fatalf("goal: %v", err)
		}
		if rows.Queue, err = st.GetQueue(ctx, ws, s.ID); err != nil {
			f.t.Fatalf("queue: %v", err)
		}
		if err := st.Update(ctx, func(tx host.Tx) error {
			for _, t := range rows.Turns {
				es, err := tx.TurnQueueEntries(ctx, ws, s.ID, t.ID)
				if err != nil {
					return err
				}
				rows.QueueReached = append(rows.QueueReached, es...)
			}
			return nil
		}); err != nil {
			f.t.Fatalf("queue entries: %v", err)
		}
		g.Sessions = append(g.Sessions, rows)
	}
	b, err := json.Marshal(g)
	if err != nil {
		f.t.Fatalf("encode dump: %v", err)
	}
	return b
}

func (f *fixture) del(by string, ids ...string) host.DeleteSessionsResult {
	f.t.Helper()
	r, err := f.host.DeleteSessions(ctx, host.DeleteSessionsInput{WorkspaceID: ws, SessionIDs: ids, By: by})
	if err != nil {
		f.t.Fatalf("delete %v: %v", ids, err)
	}
	return r
}

func (f *fixture) restore(id string) host.RestoreResult {
	f.t.Helper()
	r, err := f.host.RestoreDeletedSession(ctx, host.RestoreInput{WorkspaceID: ws, SessionID: id})
	if err != nil {
		f.t.Fatalf("restore %s: %v", id, err)
	}
	return r
}

func (f *fixture) trash() []string {
	f.t.Helper()
	p, err := f.host.ListDeletedSessions(ctx, ws, host.DeletedQuery{Limit: 200})
	if err != nil {
		f.t.Fatalf("list deleted: %v", err)
	}
	var ids []string
	for _, d := range p.Sessions {
		ids = append(ids, d.Session.ID)
	}
	slices.Sort(ids)
	return ids
}

func (f *fixture) wantGone(ids ...string) {
	f.t.Helper()
	for _, id := range ids {
		if _, err := f.host.GetSession(ctx, ws, id); host.CodeOf(err) != host.CodeNotFound {
			f.t.Fatalf("session %s after delete: %v, want not_found", id, err)
		}
	}
}

func (f *fixture) wantVisible(ids ...string) {
	f.t.Helper()
	for _, id := range ids {
		if _, err := f.host.GetSession(ctx, ws, id); err != nil {
			f.t.Fatalf("session %s: %v, want visible", id, err)
		}
	}
}

func sorted(ids ...string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}

var TrashRoundTripLossless = Scenario{"trash/delete_restore_round_trip_is_lossless", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	f.waitSettled(f.mustSend(s.ID, "tr-1", "/sim words=5"))
	child := f.withSubagent(s.ID, "tr-2")
	if _, err := f.host.UpdateSession(ctx, host.UpdateSessionInput{WorkspaceID: ws, SessionID: s.ID,
		Title: ptr("Kept title"), Pinned: ptr(true)}); err != nil {
		t.Fatal(err)
	}
	// A second tree with a goal (set, its turn fenced by a pause) and a
	// follow-up that was queued behind a busy turn and then ran.
	gsess := f.createEmpty()
	busy := f.mustSend(gsess.ID, "tr-g1", "/sim hang")
	f.waitTurn(busy, "accepted", host.Turn.Accepted)
	follow := f.mustQueue(gsess.ID, "tr-g2", "/sim words=2", host.PlacementNextTurn, host.DispositionFollowup)
	f.cancel(busy)
	f.waitEntry(gsess.ID, follow.ID, func(e host.QueueEntry) bool { return e.State == host.QueueDone })
	f.mustGoal(gsess.ID, "tr-g3", host.GoalActionSet, &host.GoalSpec{Objective: "/sim hang\nKeep the goal", MaxTurns: 4}, "alice")
	f.waitGoalTurnRunning(gsess.ID)
	f.mustGoal(gsess.ID, "tr-g4", host.GoalActionPause, nil, "bob")
	f.waitGoal(gsess.ID, "paused, its turn decided", func(g host.GoalState) bool {
		return g.Goal != nil && g.Goal.Status == host.GoalPaused && g.Goal.ActiveTurnID == ""
	})
	f.expectBusy(gsess.ID, false)
	gBefore := f.dumpGraph(gsess.ID)
	if !bytes.Contains(gBefore, []byte(`"status":"paused"`)) || !bytes.Contains(gBefore, []byte(`"state":"done"`)) {
		t.Fatalf("the dump lacks the goal or the queue: %s", gBefore)
	}

	before := f.dumpGraph(s.ID)
	dispatches := f.runtime.dispatches.Load()

	gr := f.del("carol", gsess.ID)
	if len(gr.DeletedSessionIDs) != 1 {
		t.Fatalf("delete of the goal session: %+v", gr)
	}
	if _, err := f.host.GetGoal(ctx, ws, gsess.ID); host.CodeOf(err) != host.CodeNotFound {
		t.Fatalf("goal.get of a deleted session: %v", err)
	}
	f.restore(gsess.ID)
	if gAfter := f.dumpGraph(gsess.ID); !bytes.Equal(gBefore, gAfter) {
		t.Fatalf("delete/restore changed the goal session:\nbefore %s\nafter  %s", gBefore, gAfter)
	}

	r := f.del("alice", s.ID)
	if !slices.Equal(sorted(r.DeletedSessionIDs...), sorted(s.ID, child.ID)) || len(r.Components) != 1 ||
		r.Components[0].RootSessionID != s.ID || !r.Components[0].Restorable {
		t.Fatalf("delete result: %+v", r)
	}
	// Ordinary reads treat every id of the closure as not found.
	f.wantGone(s.ID, child.ID)
	if _, err := f.host.ListSessionTurns(ctx, ws, s.ID, host.TurnQuery{}); host.CodeOf(err) != host.CodeNotFound {
		t.Fatalf("turn.list of a deleted session: %v", err)
	}
	if _, err := f.host.ListSessionMessages(ctx, ws, child.ID, host.MessageQuery{}); host.CodeOf(err) != host.CodeNotFound {
		t.Fatalf("message.list of a deleted child: %v", err)
	}
	if _, err := f.send(s.ID, "tr-3", "after delete"); host.CodeOf(err) != host.CodeNotFound {
		t.Fatalf("submit to a deleted session: %v", err)
	}
	p, _ := f.host.ListSessions(ctx, ws, host.SessionQuery{})
	for _, x := range p.Sessions {
		if x.ID == s.ID || x.ID == child.ID {
			t.Fatalf("session.list shows deleted %s", x.ID)
		}
	}
	if got := f.trash(); !slices.Equal(got, []string{s.ID}) {
		t.Fatalf("trash = %v, want only the topmost %s", got, s.ID)
	}
	// Deleting again is a successful no-op; an id never there is
	// not_found, and a batch naming one deletes nothing.
	if again := f.del("alice", s.ID); len(again.DeletedSessionIDs) != 0 || len(again.Components) != 0 {
		t.Fatalf("delete again: %+v", again)
	}
	other := f.createEmpty()
	if _, err := f.host.DeleteSessions(ctx, host.DeleteSessionsInput{WorkspaceID: ws, SessionIDs: []string{other.ID, "ses_absent"}}); host.CodeOf(err) != host.CodeNotFound {
		t.Fatalf("delete naming an absent id: %v, want not_found", err)
	}
	f.wantVisible(other.ID)

	rr := f.restore(s.ID)
	if !rr.Restored || !slices.Equal(sorted(rr.RestoredSessionIDs...), sorted(s.ID, child.ID)) {
		t.Fatalf("restore: %+v", rr)
	}
	after := f.dumpGraph(s.ID)
	if !bytes.Equal(before, after) {
		t.Fatalf("delete/restore changed the session graph:\nbefore %s\nafter  %s", before, after)
	}
	if n := f.runtime.dispatches.Load(); n != dispatches {
		t.Fatalf("restore dispatched to the agent (%d → %d)", dispatches, n)
	}
	f.wantVisible(s.ID, child.ID)
	if len(f.trash()) != 0 {
		t.Fatalf("trash after restore: %v", f.trash())
	}
	if again := f.restore(s.ID); again.Restored {
		t.Fatalf("a second restore restored again: %+v", again)
	}
	// The restored session works: the next prompt resumes the agent.
	f.waitSettled(f.mustSend(s.ID, "tr-4", "/sim words=2"))
}}

var TrashDeleteEndsLiveTurn = Scenario{"trash/delete_ends_live_turns", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	tr := f.mustSend(s.ID, "tl-1", "/sim hang")
	f.waitTurn(tr, "accepted", host.Turn.Accepted)
	f.del("alice", s.ID)
	f.wantGone(s.ID)
	got, err := f.store.GetTurn(ctx, ws, s.ID, tr.ID)
	if err != nil || !got.Settled() {
		t.Fatalf("live turn after delete: %+v %v", got, err)
	}
	if got.Outcome == host.OutcomeCompleted {
		t.Fatalf("a deleted session's live turn was settled completed: %+v", got)
	}
	sess, _ := f.store.GetSession(ctx, ws, s.ID)
	if sess.ActiveTurnID != "" {
		t.Fatalf("deleted session still has an active turn %s", sess.ActiveTurnID)
	}
	f.restore(s.ID)
	if s2, _ := f.host.GetSession(ctx, ws, s.ID); s2.ActiveTurnID != "" {
		t.Fatalf("restored session has an active turn: %+v", s2)
	}
	f.waitSettled(f.mustSend(s.ID, "tl-2", "/sim words=2"))
}}

// hookStore runs before() at the start of every Update (serialized), to
// change canonical state between a command's plan and its transaction.
type hookStore struct {
	host.Store
	mu     sync.Mutex
	before func(n int)
	n      int
}

// setBefore installs (or, with nil, removes) the hook; Updates from other
// goroutines read it under the same lock.
func (s *hookStore) setBefore(fn func(n int)) {
	s.mu.Lock()
	s.before = fn
	s.mu.Unlock()
}

func (s *hookStore) Update(ctx context.Context, fn func(host.Tx) error) error {
	s.mu.Lock()
	hook, n := s.before, s.n
	s.n++
	s.mu.Unlock()
	if hook != nil {
		hook(n)
	}
	return s.Store.Update(ctx, fn)
}

// hooked replaces the fixture's Host with one over a hookStore.
func (f *fixture) hooked() *hookStore {
	f.stopOps()
	hs := &hookStore{Store: f.store}
	f.host = host.New(host.Config{Store: hs, Runtime: f.runtime, Observer: f.obs, Now: f.clock.Now})
	if _, err := f.host.Recover(ctx); err != nil {
		f.t.Fatal(err)
	}
	f.runOps()
	return hs
}

var TrashClosureChangeReplanned = Scenario{"trash/closure_change_is_replanned", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	child := f.withSubagent(s.ID, "tc-1")
	hs := f.hooked()
	late := host.Session{WorkspaceID: ws, ID: "ses_late_child", ParentID: child.ID, RootID: s.ID,
		Title: "late", Agent: "sim", CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
	late.UpdatedAt = late.CreatedAt
	var fired atomic.Bool
	hs.setBefore(func(n int) {
		if !fired.CompareAndSwap(false, true) {
			return
		}
		// A sub-agent session appears after the plan, before the tombstone
		// transaction: the store must resolve a different closure.
		if err := f.store.Update(ctx, func(tx host.Tx) error { return tx.InsertSession(ctx, late) }); err != nil {
			t.Errorf("insert late child: %v", err)
		}
	})
	r := f.del("alice", s.ID)
	if !fired.Load() {
		t.Fatal("the hook never fired")
	}
	if !slices.Equal(sorted(r.DeletedSessionIDs...), sorted(s.ID, child.ID, late.ID)) || len(r.Components) != 1 {
		t.Fatalf("replanned delete: %+v, want the late child in the one component", r)
	}
	f.wantGone(s.ID, child.ID, late.ID)
	rr := f.restore(s.ID)
	if len(rr.RestoredSessionIDs) != 3 {
		t.Fatalf("restore after replan: %+v", rr)
	}
}}

var TrashSiblingSubtrees = Scenario{"trash/sibling_subtrees_restore_independently", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	c1 := f.withSubagent(s.ID, "ts-1")
	c2 := f.withSubagent(s.ID, "ts-2")
	// One batch of two siblings: connectivity inside the delete set makes
	// two components.
	r := f.del("alice", c1.ID, c2.ID)
	if len(r.Components) != 2 || r.Components[0].Generation == r.Components[1].Generation {
		t.Fatalf("batch of siblings: %+v, want two components", r)
	}
	f.wantVisible(s.ID)
	f.wantGone(c1.ID, c2.ID)
	if got := f.trash(); !slices.Equal(got, sorted(c1.ID, c2.ID)) {
		t.Fatalf("trash = %v", got)
	}
	f.restore(c1.ID)
	f.wantVisible(c1.ID)
	f.wantGone(c2.ID)
	f.restore(c2.ID)
	f.wantVisible(c1.ID, c2.ID)
	// Separately deleted siblings, too.
	f.del("alice", c2.ID)
	f.del("bob", c1.ID)
	f.restore(c2.ID)
	f.wantVisible(c2.ID)
	f.wantGone(c1.ID)
}}

var TrashAbsorbedDescendants = Scenario{"trash/ancestor_delete_absorbs_descendant_tombstones", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	c1 := f.withSubagent(s.ID, "ta-1")
	c2 := f.withSubagent(s.ID, "ta-2")
	before := f.dumpGraph(s.ID)
	f.del("alice", c1.ID)
	r := f.del("bob", s.ID)
	if len(r.Components) != 1 || !slices.Equal(sorted(r.Components[0].SessionIDs...), sorted(s.ID, c1.ID, c2.ID)) {
		t.Fatalf("ancestor delete: %+v, want one generation over all three", r)
	}
	if got := f.trash(); !slices.Equal(got, []string{s.ID}) {
		t.Fatalf("trash = %v, want only the root", got)
	}
	_, err := f.host.RestoreDeletedSession(ctx, host.RestoreInput{WorkspaceID: ws, SessionID: c1.ID})
	if e, ok := err.(*host.Error); !ok || e.Code != host.CodeOperationConflict {
		t.Fatalf("restore of an absorbed descendant: %v, want operation_conflict", err)
	}
	rr := f.restore(s.ID)
	if len(rr.RestoredSessionIDs) != 3 {
		t.Fatalf("restore: %+v", rr)
	}
	if after := f.dumpGraph(s.ID); !bytes.Equal(before, after) {
		t.Fatalf("absorb and restore changed the graph:\nbefore %s\nafter  %s", before, after)
	}
}}

var TrashPurgeRetention = Scenario{"trash/purge_keeps_live_and_too_new_removes_eligible_atomically", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	old := f.createEmpty()
	oldChild := f.withSubagent(old.ID, "tp-1")
	withLive := f.createEmpty()
	f.del("alice", old.ID)
	f.del("alice", withLive.ID)
	// A live member under a deleted root (a sub-agent that appeared after
	// the delete) keeps the whole tree.
	live := host.Session{WorkspaceID: ws, ID: "ses_live_member", ParentID: withLive.ID, RootID: withLive.ID,
		Title: "live", Agent: "sim", CreatedAt: f.clock.Now().UTC().Truncate(time.Millisecond)}
	live.UpdatedAt = live.CreatedAt
	if err := f.store.Update(ctx, func(tx host.Tx) error { return tx.InsertSession(ctx, live) }); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(2 * time.Hour)
	young := f.createEmpty()
	f.del("alice", young.ID)

	res, err := f.host.PurgeExpired(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Purged) != 1 || res.Purged[0].RootSessionID != old.ID ||
		!slices.Equal(res.Purged[0].SessionIDs, sorted(old.ID, oldChild.ID)) {
		t.Fatalf("retention purged %+v, want exactly the old tree", res.Purged)
	}
	if res.Counts.Sessions != 2 || res.Counts.Turns < 2 || res.Counts.Messages < 2 || res.Counts.Interactions < 1 {
		t.Fatalf("purge counts %+v", res.Counts)
	}
	for _, id := range []string{old.ID, oldChild.ID} {
		if _, err := f.store.GetSession(ctx, ws, id); host.CodeOf(err) != host.CodeNotFound {
			t.Fatalf("purged session %s still stored: %v", id, err)
		}
		if p, err := f.store.ListMessages(ctx, ws, id, host.MessageQuery{}); err != nil || len(p.Messages) != 0 {
			t.Fatalf("purged session %s keeps messages: %v %v", id, p.Messages, err)
		}
	}
	for _, id := range []string{withLive.ID, live.ID, young.ID} {
		if _, err := f.store.GetSession(ctx, ws, id); err != nil {
			t.Fatalf("kept session %s: %v", id, err)
		}
	}
	// Idempotent: a second pass and an explicit purge of a purged id.
	if again, err := f.host.PurgeExpired(ctx, time.Hour); err != nil || len(again.Purged) != 0 {
		t.Fatalf("second pass: %+v %v", again, err)
	}
	if _, err := f.host.PurgeDeletedSessionTrees(ctx, host.PurgeInput{WorkspaceID: ws, SessionIDs: []string{old.ID}}); host.CodeOf(err) != host.CodeNotFound {
		t.Fatalf("explicit purge of a purged id: %v, want not_found", err)
	}
	// An explicit purge ignores age but never a live session.
	if _, err := f.host.PurgeDeletedSessionTrees(ctx, host.PurgeInput{WorkspaceID: ws, SessionIDs: []string{live.ID}}); host.CodeOf(err) != host.CodeOperationConflict {
		t.Fatalf("purge of a live session: %v, want operation_conflict", err)
	}
	r, err := f.host.PurgeDeletedSessionTrees(ctx, host.PurgeInput{WorkspaceID: ws, SessionIDs: []string{young.ID}})
	if err != nil || len(r.Purged) != 1 {
		t.Fatalf("explicit purge of a young tree: %+v %v", r, err)
	}
}}

var TrashPurgeLosesToRestore = Scenario{"trash/purge_loses_to_a_concurrent_restore", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	f.waitSettled(f.mustSend(s.ID, "tq-1", "/sim words=3"))
	f.del("alice", s.ID)
	f.clock.Advance(2 * time.Hour)
	hs := f.hooked()
	var fired atomic.Bool
	hs.setBefore(func(int) {
		if !fired.CompareAndSwap(false, true) {
			return
		}
		// Between candidate selection and the purge transaction: restore
		// and delete again, so the row carries a newer deletedAt.
		inner := host.New(host.Config{Store: f.store, Runtime: f.runtime, Observer: f.obs, Now: f.clock.Now})
		if _, err := inner.RestoreDeletedSession(ctx, host.RestoreInput{WorkspaceID: ws, SessionID: s.ID}); err != nil {
			t.Errorf("concurrent restore: %v", err)
		}
		f.clock.Advance(time.Second)
		if _, err := inner.DeleteSessions(ctx, host.DeleteSessionsInput{WorkspaceID: ws, SessionIDs: []string{s.ID}}); err != nil {
			t.Errorf("delete again: %v", err)
		}
	})
	res, err := f.host.PurgeExpired(ctx, time.Hour)
	if err != nil || !fired.Load() {
		t.Fatalf("purge: %v (hook fired %v)", err, fired.Load())
	}
	if len(res.Purged) != 0 {
		t.Fatalf("purge removed a tree restored meanwhile: %+v", res.Purged)
	}
	if _, err := f.store.GetSession(ctx, ws, s.ID); err != nil {
		t.Fatalf("restored-and-redeleted session was purged: %v", err)
	}
	hs.setBefore(nil)
	f.restore(s.ID)
	f.wantVisible(s.ID)
}}

var TrashWorkspaceScoped = Scenario{"trash/other_workspace_ids_are_not_found", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	other := "ws-other"
	if _, err := f.host.DeleteSessions(ctx, host.DeleteSessionsInput{WorkspaceID: other, SessionIDs: []string{s.ID}}); host.CodeOf(err) != host.CodeNotFound {
		t.Fatalf("delete through another workspace: %v, want not_found", err)
	}
	f.wantVisible(s.ID)
	f.del("alice", s.ID)
	if _, err := f.host.RestoreDeletedSession(ctx, host.RestoreInput{WorkspaceID: other, SessionID: s.ID}); host.CodeOf(err) != host.CodeNotFound {
		t.Fatalf("restore through another workspace: %v", err)
	}
	if p, err := f.host.ListDeletedSessions(ctx, other, host.DeletedQuery{}); err != nil || len(p.Sessions) != 0 {
		t.Fatalf("trash of another workspace: %+v %v", p, err)
	}
	if _, err := f.host.PurgeDeletedSessionTrees(ctx, host.PurgeInput{WorkspaceID: other, SessionIDs: []string{s.ID}}); host.CodeOf(err) != host.CodeNotFound {
		t.Fatalf("purge through another workspace: %v, want not_found", err)
	}
	f.restore(s.ID)
	for _, bad := range [][]string{nil, {""}, {"has space"}} {
		if _, err := f.host.DeleteSessions(ctx, host.DeleteSessionsInput{WorkspaceID: ws, SessionIDs: bad}); host.CodeOf(err) != host.CodeInvalidInput {
			t.Fatalf("delete %q: %v, want invalid_input", bad, err)
		}
	}
	f.wantVisible(s.ID)
}}

func ptr[T any](v T) *T { return &v }

// recordingGuard admits or rejects deletes and records every call.
type recordingGuard struct {
	mu       sync.Mutex
	reject   error
	admitted [][]string
	reports  []error
}

func (g *recordingGuard) AdmitDeletion(_ context.Context, _ string, closure []string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.admitted = append(g.admitted, closure)
	return g.reject
}

func (g *recordingGuard) DeletionAttempt(_ context.Context, _ string, _ []string, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reports = append(g.reports, err)
}

// guarded replaces the fixture's Host with one over a hookStore and g.
func (f *fixture) guarded(g host.SessionDeletionGuard) *hookStore {
	f.stopOps()
	hs := &hookStore{Store: f.store}
	f.host = host.New(host.Config{Store: hs, Runtime: f.runtime, Observer: f.obs, Now: f.clock.Now, DeletionGuard: g})
	if _, err := f.host.Recover(ctx); err != nil {
		f.t.Fatal(err)
	}
	f.runOps()
	return hs
}

var TrashDeletionGuard = Scenario{"trash/deletion_guard_admits_the_exact_closure", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	child := f.withSubagent(s.ID, "tg-1")
	g := &recordingGuard{reject: errf("not now")}
	hs := f.guarded(g)
	live := f.mustSend(s.ID, "tg-2", "/sim hang")
	f.waitTurn(live, "accepted", host.Turn.Accepted)
	cancels := f.runtime.cancels.Load()

	// Rejected: nothing is closed or tombstoned, and nothing is reported.
	_, err := f.host.DeleteSessions(ctx, host.DeleteSessionsInput{WorkspaceID: ws, SessionIDs: []string{s.ID}})
	if e, ok := err.(*host.Error); !ok || e.Code != host.CodeOperationConflict || e.Reason != host.ReasonDeletionRejected {
		t.Fatalf("rejected delete: %v", err)
	}
	if len(g.admitted) != 1 || !slices.Equal(g.admitted[0], sorted(s.ID, child.ID)) || len(g.reports) != 0 {
		t.Fatalf("guard saw %v, reports %v", g.admitted, g.reports)
	}
	f.wantVisible(s.ID, child.ID)
	if n := f.runtime.cancels.Load(); n != cancels {
		t.Fatalf("a rejected delete cancelled the live turn (%d → %d)", cancels, n)
	}
	if tu, _ := f.host.GetTurn(ctx, ws, s.ID, live.ID); tu.Settled() {
		t.Fatalf("a rejected delete settled the live turn: %+v", tu)
	}

	// Admitted, with the tree changing once: the failed attempt is
	// reported and the new closure admitted before anything is written.
	g.mu.Lock()
	g.reject, g.admitted = nil, nil
	g.mu.Unlock()
	late := host.Session{WorkspaceID: ws, ID: "ses_guard_late", ParentID: s.ID, RootID: s.ID,
		Title: "late", Agent: "sim", CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
	late.UpdatedAt = late.CreatedAt
	var inserted atomic.Bool
	hs.setBefore(func(int) {
		// Just before the first tombstone transaction (after the live
		// turn's cancel committed).
		g.mu.Lock()
		admitted := len(g.admitted)
		g.mu.Unlock()
		if inserted.Load() || admitted == 0 {
			return
		}
		if tu, _ := f.store.GetTurn(ctx, ws, s.ID, live.ID); !tu.Settled() {
			return
		}
		if !inserted.CompareAndSwap(false, true) {
			return
		}
		if err := f.store.Update(ctx, func(tx host.Tx) error { return tx.InsertSession(ctx, late) }); err != nil {
			t.Errorf("insert late child: %v", err)
		}
	})
	r := f.del("alice", s.ID)
	if !inserted.Load() {
		t.Fatal("the tree never changed")
	}
	if len(g.admitted) != 2 || !slices.Equal(g.admitted[1], sorted(s.ID, child.ID, late.ID)) {
		t.Fatalf("admissions %v, want the first closure then the replanned one", g.admitted)
	}
	if len(g.reports) != 2 || !errors.Is(g.reports[0], host.ErrSessionTreeChanged) || g.reports[1] != nil {
		t.Fatalf("reports %v, want tree changed then committed", g.reports)
	}
	if len(r.DeletedSessionIDs) != 3 {
		t.Fatalf("delete: %+v", r)
	}
	f.wantGone(s.ID, child.ID, late.ID)
}}

var TrashLegacyNeverUpgraded = Scenario{"trash/legacy_descendant_tombstone_is_never_upgraded", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	child := f.withSubagent(s.ID, "tl-1")
	// A tombstone from before deletes were lossless: deleted_at only.
	if err := f.store.Update(ctx, func(tx host.Tx) error {
		c, err := tx.Session(ctx, ws, child.ID)
		if err != nil {
			return err
		}
		at := f.clock.Now().UTC().Truncate(time.Millisecond)
		c.DeletedAt = &at
		return tx.UpdateSession(ctx, c)
	}); err != nil {
		t.Fatal(err)
	}
	p, err := f.host.ListDeletedSessions(ctx, ws, host.DeletedQuery{})
	if err != nil || len(p.Sessions) != 1 || p.Sessions[0].Tombstone.Restorable {
		t.Fatalf("legacy tombstone in the trash: %+v %v", p.Sessions, err)
	}
	r := f.del("alice", s.ID)
	if len(r.Components) != 1 || r.Components[0].Restorable || len(r.DeletedSessionIDs) != 2 {
		t.Fatalf("ancestor delete over a legacy tombstone: %+v, want one unrestorable component", r)
	}
	_, err = f.host.RestoreDeletedSession(ctx, host.RestoreInput{WorkspaceID: ws, SessionID: s.ID})
	if e, ok := err.(*host.Error); !ok || e.Code != host.CodeOperationConflict || e.Reason != host.ReasonNotRestorable {
		t.Fatalf("restore of a component with a legacy member: %v", err)
	}
	f.wantGone(s.ID, child.ID)
	pr, err := f.host.PurgeDeletedSessionTrees(ctx, host.PurgeInput{WorkspaceID: ws, SessionIDs: []string{s.ID}})
	if err != nil || len(pr.Purged) != 1 || len(pr.Purged[0].SessionIDs) != 2 {
		t.Fatalf("purge of the unrestorable component: %+v %v", pr, err)
	}
}}

// TrashFailedReleaseRetried: a runtime release that fails after the delete
// committed is reported in cleanupFailures and then retried by the
// reconciler with backoff until it goes through. One restored before its
// retry is never released: its runtime is its own again.
var TrashFailedReleaseRetried = Scenario{Name: "trash/failed-release-retried", Run: func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	f.waitSettled(f.mustSend(s.ID, "rel-1", "/sim words=2"))
	f.runtime.set(func(r *probeRuntime) { r.failReleases = 1 })
	res := f.del("alice", s.ID)
	if !slices.Equal(res.CleanupFailures, []string{s.ID}) || f.runtime.releases(s.ID) != 0 {
		t.Fatalf("delete with a failing release: %+v, %d releases", res, f.runtime.releases(s.ID))
	}
	if n := f.host.PendingReleases(); n != 1 {
		t.Fatalf("pending releases after the failure: %d, want 1", n)
	}
	f.clock.Advance(2 * time.Second) // past the first backoff
	waitUntil(t, "the reconciler retries the release", func() bool {
		return f.runtime.releases(s.ID) == 1 && f.host.PendingReleases() == 0
	})
	f.wantGone(s.ID)

	// Restored before the retry: no release, and nothing left pending.
	s2 := f.createEmpty()
	f.runtime.set(func(r *probeRuntime) { r.failReleases = 1 })
	if res := f.del("alice", s2.ID); !slices.Equal(res.CleanupFailures, []string{s2.ID}) {
		t.Fatalf("second delete: %+v", res)
	}
	f.restore(s2.ID)
	f.clock.Advance(2 * time.Second)
	waitUntil(t, "the restored session's retry is dropped", func() bool { return f.host.PendingReleases() == 0 })
	if n := f.runtime.releases(s2.ID); n != 0 {
		t.Fatalf("a restored session's runtime was released %d times", n)
	}
}}

func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TrashFactsCommitted: every delete, restore, explicit purge and retention
// purge publishes one trash/changed fact naming exactly the ids it moved,
// in the same committed batch as the sessions' own change facts, so
// watchers of the Trash hear of a purge too.
var TrashFactsCommitted = Scenario{Name: "trash/every_change_commits_a_trash_fact", Run: func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	a, b := f.createEmpty(), f.createEmpty()
	n := f.obs.batchCount()
	f.del("alice", a.ID)
	f.restore(a.ID)
	f.del("alice", a.ID, b.ID)
	if _, err := f.host.PurgeDeletedSessionTrees(ctx, host.PurgeInput{WorkspaceID: ws, SessionIDs: []string{a.ID}}); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(2 * time.Hour)
	if res, err := f.host.PurgeExpired(ctx, time.Hour); err != nil || len(res.Purged) != 1 {
		t.Fatalf("retention: %+v %v", res, err)
	}
	want := []host.TrashChange{
		{Deleted: []string{a.ID}},
		{Restored: []string{a.ID}},
		{Deleted: sorted(a.ID, b.ID)},
		{Purged: []string{a.ID}},
		{Purged: []string{b.ID}},
	}
	var got []host.TrashChange
	waitUntil(t, "every trash fact is published", func() bool {
		got = got[:0]
		for _, batch := range f.obs.batchesSince(n) {
			changed := map[string]bool{}
			for _, fa := range batch {
				if fa.Kind == host.FactSessionChanged {
					changed[fa.SessionID] = true
				}
			}
			for _, fa := range batch {
				if fa.Kind != host.FactTrashChanged {
					continue
				}
				if fa.WorkspaceID != ws || fa.SessionID != "" || fa.Trash == nil {
					t.Fatalf("malformed trash fact %+v", fa)
				}
				for _, id := range slices.Concat(fa.Trash.Deleted, fa.Trash.Restored, fa.Trash.Purged) {
					if !changed[id] {
						t.Fatalf("trash fact %+v published without %s's own change in its batch", *fa.Trash, id)
					}
				}
				got = append(got, *fa.Trash)
			}
		}
		return len(got) >= len(want)
	})
	// A commit's facts publish on the queue of the session they are
	// about, so trash facts of different commits need not arrive in commit
	// order (docs/protocol.md: a signal to reread, not a log): compare
	// them as a whole.
	if g, w := sortedJSON(got), sortedJSON(want); !slices.Equal(g, w) {
		t.Fatalf("trash facts:\n got %s\nwant %s", g, w)
	}
}}

func sortedJSON(cs []host.TrashChange) []string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		b, _ := json.Marshal(c)
		out = append(out, string(b))
	}
	slices.Sort(out)
	return out
}

// goalBytes is the session's goal record as stored, for exact comparison.
func (f *fixture) goalBytes(sid string) []byte {
	f.t.Helper()
	g, err := f.store.GetGoal(ctx, ws, sid)
	if err != nil {
		f.t.Fatalf("goal of %s: %v", sid, err)
	}
	b, err := json.Marshal(g)
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

// TrashDeleteHoldsGoalAndQueue: deleting a session while its active goal's
// turn runs, with follow-ups queued behind it, ends the turn and nothing
// else: no queued follow-up becomes a successor turn, the goal loop
// neither decides the ended turn nor arms another (also across many
// passes), the queued input is withdrawn (retracted by the delete) and
// the goal record is byte-for-byte unchanged. Restore brings it back
// exactly and held: it stays active without starting the agent until a
// person resumes it, which starts a new revision whose goal_arm runs.
var TrashDeleteHoldsGoalAndQueue = Scenario{"trash/delete_holds_goal_and_withdraws_queue", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	set := f.mustGoal(s.ID, "hg-1", host.GoalActionSet, &host.GoalSpec{Objective: "/sim hang\nKeep going", MaxTurns: 5}, "alice")
	run := f.waitGoalTurnRunning(s.ID)
	f1 := f.mustQueue(s.ID, "hg-2", "/sim words=2 one", host.PlacementNextTurn, host.DispositionFollowup)
	f2 := f.mustQueue(s.ID, "hg-3", "/sim words=2 two", host.PlacementNextTurn, host.DispositionFollowup)
	goalBefore := f.goalBytes(s.ID)
	dispatches := f.runtime.dispatches.Load()

	f.del("bob", s.ID)
	f.wantGone(s.ID)
	ended, err := f.store.GetTurn(ctx, ws, s.ID, run.ID)
	if err != nil || !ended.Settled() || ended.Goal == nil || ended.Goal.OperationID != set.Operation.ID {
		t.Fatalf("ended goal turn: %+v", ended)
	}
	for _, id := range []string{f1.ID, f2.ID} {
		if e := f.entry(s.ID, id); e.State != host.QueueRetracted || e.RetractedBy != "ensemble:session_deleted" || e.TurnID != "" {
			t.Fatalf("queued follow-up after delete: %+v", e)
		}
	}
	time.Sleep(1200 * time.Millisecond) // more than two goal worker passes
	if ts := f.storeTurns(s.ID); len(ts) != 1 {
		t.Fatalf("a turn was admitted on the deleted session: %d turns", len(ts))
	}
	if sess, _ := f.store.GetSession(ctx, ws, s.ID); sess.ActiveTurnID != "" {
		t.Fatalf("deleted session has an active turn %s", sess.ActiveTurnID)
	}
	if got := f.goalBytes(s.ID); !bytes.Equal(goalBefore, got) {
		t.Fatalf("delete changed the goal:\nbefore %s\nafter  %s", goalBefore, got)
	}
	if n := f.runtime.dispatches.Load(); n != dispatches {
		t.Fatalf("dispatched on a deleted session (%d → %d)", dispatches, n)
	}

	f.restore(s.ID)
	time.Sleep(1200 * time.Millisecond)
	if got := f.goalBytes(s.ID); !bytes.Equal(goalBefore, got) {
		t.Fatalf("restore (or the loop after it) changed the goal:\nbefore %s\nafter  %s", goalBefore, got)
	}
	if n := len(f.turnsOldestFirst(s.ID)); n != 1 || f.runtime.dispatches.Load() != dispatches {
		t.Fatalf("a restored active goal started the agent by itself: %d turns", n)
	}
	g, err := f.host.GetGoal(ctx, ws, s.ID)
	if err != nil || g.Goal == nil || g.Goal.Status != host.GoalActive || g.Goal.Revision != 1 || !g.Held {
		t.Fatalf("restored goal: held %v %+v %v", g.Held, g.Goal, err)
	}
	// Watchers learn it too: the delete committed a goal_state fact at the
	// unchanged Seq with held set, and the session list shows it held.
	f.waitGoalFact(ws, s.ID, "held at the goal's own seq", func(h host.GoalState) bool {
		return h.Held && h.Seq == g.Seq && h.Revision == g.Revision
	})
	if ls, err := f.host.GetSession(ctx, ws, s.ID); err != nil || ls.Goal == nil || !ls.Goal.Held || ls.Goal.Status != host.GoalActive {
		t.Fatalf("restored session's goal summary: %+v %v", ls.Goal, err)
	}
	// A person resumes it: a new revision, armed afresh.
	res := f.mustGoal(s.ID, "hg-4", host.GoalActionResume, nil, "carol")
	if res.Goal == nil || res.Goal.Status != host.GoalActive || res.Goal.Revision != 2 {
		t.Fatalf("resume of a held goal: %+v", res.Goal)
	}
	next := f.waitGoalTurnRunning(s.ID)
	if next.Goal == nil || next.Goal.Kind != host.OriginGoalArm || next.Goal.Revision != 2 || next.Goal.OperationID != res.Operation.ID {
		t.Fatalf("turn after resume: %+v", next.Goal)
	}
	if g, err := f.host.GetGoal(ctx, ws, s.ID); err != nil || g.Held {
		t.Fatalf("a resumed goal still reads held: %+v %v", g, err)
	}
	f.waitGoalFact(ws, s.ID, "of the resume, not held", func(h host.GoalState) bool { return h.Revision == 2 && !h.Held })
	if ls, err := f.host.GetSession(ctx, ws, s.ID); err != nil || ls.Goal == nil || ls.Goal.Held {
		t.Fatalf("resumed session's goal summary: %+v %v", ls.Goal, err)
	}
	f.mustGoal(s.ID, "hg-5", host.GoalActionClear, nil, "carol")
	f.waitSettled(next)
}}

// storeTurns lists every turn of a session through the store (deleted
// sessions included), oldest first.
func (f *fixture) storeTurns(sid string) []host.Turn {
	f.t.Helper()
	p, err := f.store.ListTurns(ctx, ws, sid, host.TurnQuery{Limit: 200})
	if err != nil {
		f.t.Fatalf("turns: %v", err)
	}
	slices.Reverse(p.Turns)
	return p.Turns
}

// TrashDeleteFailsPendingGoalWork: a goal operation still accepted when
// its session is deleted (a pause whose fence could not stop the turn)
// ends failed with session_deleted and its fence is closed, so no worker
// retries either against the deleted session (seed: "a pending Goal
// operation is failed and detached from the state"); the goal record is
// untouched and comes back with the restore.
var TrashDeleteFailsPendingGoalWork = Scenario{"trash/delete_fails_pending_goal_operations", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	f.mustGoal(s.ID, "pg-1", host.GoalActionSet, &host.GoalSpec{Objective: "/sim hang\nLong work"}, "alice")
	f.waitGoalTurnRunning(s.ID)
	f.runtime.mu.Lock()
	f.runtime.failCancels = 1 << 20
	f.runtime.mu.Unlock()
	p := f.mustGoal(s.ID, "pg-2", host.GoalActionPause, nil, "bob")
	if p.Operation.State != host.GoalOpAccepted {
		t.Fatalf("pause with an unstoppable turn: %+v", p.Operation)
	}
	goalBefore := f.goalBytes(s.ID)

	f.del("carol", s.ID)
	f.runtime.mu.Lock()
	f.runtime.failCancels = 0
	f.runtime.mu.Unlock()
	op, err := f.store.GetGoalOperation(ctx, ws, "pg-2")
	if err != nil || op.State != host.GoalOpFailed || op.Error != host.StopSessionDeleted {
		t.Fatalf("pending pause after delete: %+v %v", op, err)
	}
	fences, err := f.store.PendingGoalFences(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, fe := range fences {
		if fe.WorkspaceID == ws && fe.SessionID == s.ID {
			t.Fatalf("a fence on the deleted session is still pending: %+v", fe)
		}
	}
	time.Sleep(1200 * time.Millisecond) // more than two goal worker passes
	if op, _ := f.store.GetGoalOperation(ctx, ws, "pg-2"); op.State != host.GoalOpFailed {
		t.Fatalf("the worker took up a deleted session's goal operation: %+v", op)
	}
	if got := f.goalBytes(s.ID); !bytes.Equal(goalBefore, got) {
		t.Fatalf("delete changed the goal:\nbefore %s\nafter  %s", goalBefore, got)
	}
	// A retry of the failed operation answers it, and changes nothing.
	if _, err := f.goal(s.ID, "pg-2", host.GoalActionPause, nil, "bob"); host.CodeOf(err) != host.CodeNotFound && err != nil {
		t.Fatalf("retry of the failed pause: %v", err)
	}
	f.restore(s.ID)
	if got := f.goalBytes(s.ID); !bytes.Equal(goalBefore, got) {
		t.Fatalf("restore changed the goal:\nbefore %s\nafter  %s", goalBefore, got)
	}
	res := f.mustGoal(s.ID, "pg-3", host.GoalActionResume, nil, "alice")
	next := f.waitGoalTurnRunning(s.ID)
	if next.Goal == nil || next.Goal.OperationID != res.Operation.ID {
		t.Fatalf("turn after resume: %+v", next.Goal)
	}
	f.mustGoal(s.ID, "pg-4", host.GoalActionClear, nil, "alice")
	f.waitSettled(next)
}}

// TrashFailedDeleteChangesNothing: a delete whose tombstone transaction
// fails with a store error after its pre-cancel commit (goal held, queue
// withdrawn) undoes that commit: the session stays live, its goal is no
// longer held, and the follow-ups it withdrew wait again and run, as they
// would have at the cancelled turn's handoff.
var TrashFailedDeleteChangesNothing = Scenario{"trash/failed_delete_undoes_its_pre_cancel_commit", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	set := f.mustGoal(s.ID, "fd-1", host.GoalActionSet, &host.GoalSpec{Objective: "/sim hang\nKeep going", MaxTurns: 5}, "alice")
	run := f.waitGoalTurnRunning(s.ID)
	f1 := f.mustQueue(s.ID, "fd-2", "/sim words=2 one", host.PlacementNextTurn, host.DispositionFollowup)
	f2 := f.mustQueue(s.ID, "fd-3", "/sim words=2 two", host.PlacementNextTurn, host.DispositionFollowup)

	f.store.failTombstones.Store(true)
	_, err := f.host.DeleteSessions(ctx, host.DeleteSessionsInput{WorkspaceID: ws, SessionIDs: []string{s.ID}, By: "bob"})
	f.store.failTombstones.Store(false)
	if err == nil {
		t.Fatal("delete with a failing tombstone write succeeded")
	}
	if sess, err := f.store.GetSession(ctx, ws, s.ID); err != nil || sess.DeletedAt != nil {
		t.Fatalf("session after the failed delete: %+v %v", sess, err)
	}
	if g, err := f.host.GetGoal(ctx, ws, s.ID); err != nil || g.Held || g.Goal == nil || g.Goal.OperationID != set.Operation.ID {
		t.Fatalf("goal after the failed delete: held %v %+v %v", g.Held, g.Goal, err)
	}
	// The withdrawn follow-ups wait again and run, in order, as successors.
	for _, id := range []string{f1.ID, f2.ID} {
		e := f.waitEntry(s.ID, id, func(e host.QueueEntry) bool { return e.State != host.QueueRetracted && e.State != host.QueueQueued })
		if e.RetractedBy != "" || e.TurnID == "" {
			t.Fatalf("follow-up after the failed delete: %+v", e)
		}
		f.waitEntry(s.ID, id, func(e host.QueueEntry) bool { return e.State == host.QueueDone })
	}
	if ended, err := f.store.GetTurn(ctx, ws, s.ID, run.ID); err != nil || !ended.Settled() {
		t.Fatalf("the goal turn the delete cancelled: %+v %v", ended, err)
	}
	// The delete then succeeds, and a later one has nothing to undo.
	f.mustGoal(s.ID, "fd-4", host.GoalActionClear, nil, "alice")
	f.del("bob", s.ID)
	f.wantGone(s.ID)
}}
