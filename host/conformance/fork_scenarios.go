package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ensemble-dev/ensemble/host"
)

// Session fork and settings (issue 14). The fork runtimes come from
// Driver.NewRuntimeForking.

// forkFixture is a fixture whose runtime attests mode and whose Host
// bounds working directories by root ("" = unchecked).
func forkFixture(t *testing.T, d Driver, mode host.ForkMode, root string) *fixture {
	t.Helper()
	f := newFixture(t, d)
	f.stopOps()
	f.runtime = &probeRuntime{Runtime: d.NewRuntimeForking(t, mode)}
	f.obs = &recordingObserver{}
	f.host = host.New(host.Config{Store: f.store, Runtime: f.runtime, Observer: f.obs, Now: f.clock.Now, WorkspaceRoot: root})
	if _, err := f.host.Recover(ctx); err != nil {
		t.Fatalf("recover: %v", err)
	}
	f.runOps()
	return f
}

var promptSeq atomic.Int64

// settledTurns sends each prompt and waits for it to complete.
func (f *fixture) settledTurns(sid string, prompts ...string) []host.Turn {
	f.t.Helper()
	var out []host.Turn
	for i, p := range prompts {
		t := f.waitSettled(f.mustSend(sid, fmt.Sprintf("%s-p%d", sid, promptSeq.Add(1)), p))
		if t.Outcome != host.OutcomeCompleted {
			f.t.Fatalf("turn %d: %s/%s", i, t.Outcome, t.FailureReason)
		}
		out = append(out, t)
	}
	return out
}

func (f *fixture) fork(sid, turnID, id string) (host.Session, error) {
	return f.host.ForkSession(ctx, host.ForkSessionInput{WorkspaceID: ws, SessionID: sid, TurnID: turnID,
		ClientSubmitID: id, By: "bob", ByName: "Bob"})
}

func (f *fixture) visibleCount() int {
	f.t.Helper()
	p, err := f.host.ListSessions(ctx, ws, host.SessionQuery{Limit: 100})
	if err != nil {
		f.t.Fatalf("list sessions: %v", err)
	}
	return len(p.Sessions)
}

// transcriptShape is what a fork must copy: each message's turn position,
// role, kind and text, in order.
func (f *fixture) transcriptShape(sid string) []string {
	f.t.Helper()
	turns, err := f.host.ListSessionTurns(ctx, ws, sid, host.TurnQuery{Limit: 200})
	if err != nil {
		f.t.Fatalf("list turns: %v", err)
	}
	seq := map[string]int64{}
	for _, t := range turns.Turns {
		seq[t.ID] = t.Seq
	}
	var out []string
	for _, m := range f.messages(sid, host.MessageQuery{Limit: 1000}) {
		out = append(out, strings.Join([]string{string(rune('0' + seq[m.TurnID])), string(m.Role), string(m.Kind), m.Content.Text}, "|"))
	}
	return out
}

// ForkThroughEarlierTurn: the sim agent forks through any turn; the fork
// holds exactly the transcript through it, its agent remembers exactly
// those prompts, titles follow one lineage sequence, the clientSubmitId is
// idempotent, and the source keeps working.
var ForkThroughEarlierTurn = Scenario{Name: "fork/through_an_earlier_turn_with_the_sim_agent", Run: func(t *testing.T, d Driver) {
	f := forkFixture(t, d, host.ForkAnyTurn, "")
	r, err := f.host.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: ws, Title: "Plan", CreatedBy: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	src := r.Session
	turns := f.settledTurns(src.ID, "/sim instant\nfirst", "/sim instant\nsecond", "/sim instant\nthird")
	before := f.transcriptShape(src.ID)

	fk, err := f.fork(src.ID, turns[1].ID, "fork-1")
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	if fk.Title != "Plan (2)" || fk.ParentID != "" || fk.RootID != fk.ID || fk.ID == src.ID || fk.TurnCount != 2 || fk.CreatedBy != "bob" {
		t.Fatalf("fork session: %+v", fk)
	}
	got := f.transcriptShape(fk.ID)
	var want []string
	for _, line := range before {
		if line[0] <= '2' {
			want = append(want, line)
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || len(want) == len(before) {
		t.Fatalf("fork transcript:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Copied turns are bound to the new provider session.
	ft, err := f.host.ListSessionTurns(ctx, ws, fk.ID, host.TurnQuery{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range ft.Turns {
		if !tr.Settled() || tr.ProviderSessionID != fk.ProviderSessionID || !strings.Contains(tr.ProviderTurnID, fk.ProviderSessionID) {
			t.Fatalf("copied turn: %+v (fork provider session %s)", tr, fk.ProviderSessionID)
		}
	}
	// The fork's agent remembers exactly the first two prompts.
	rt := f.waitSettled(f.mustSend(fk.ID, "fork-recall", "/sim recall"))
	if rt.Outcome != host.OutcomeCompleted || rt.Seq != 3 {
		t.Fatalf("recall turn in fork: %+v", rt)
	}
	f.waitAgentText(fk.ID, "I remember 2 earlier prompts. [1] /sim instant\nfirst [2] /sim instant\nsecond")

	// Idempotent; a different request under the same id is a conflict.
	again, err := f.fork(src.ID, turns[1].ID, "fork-1")
	if err != nil || again.ID != fk.ID {
		t.Fatalf("replayed fork: %+v %v", again, err)
	}
	_, err = f.fork(src.ID, turns[0].ID, "fork-1")
	wantReason(t, err, host.CodeOperationConflict, "client_submit_id_reused")

	// Another fork from the same point, and a fork of the fork, continue
	// the lineage's numbering.
	fk3, err := f.fork(src.ID, turns[1].ID, "fork-2")
	if err != nil || fk3.Title != "Plan (3)" || fk3.ID == fk.ID {
		t.Fatalf("second fork: %+v %v", fk3, err)
	}
	fk4, err := f.fork(fk.ID, rt.ID, "fork-3")
	if err != nil || fk4.Title != "Plan (4)" {
		t.Fatalf("fork of a fork: %+v %v", fk4, err)
	}
	// The source is unchanged and keeps working.
	if after := f.transcriptShape(src.ID); strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Fatalf("source changed by the fork")
	}
	st := f.waitSettled(f.mustSend(src.ID, "src-more", "/sim recall"))
	if st.Outcome != host.OutcomeCompleted {
		t.Fatalf("source after fork: %+v", st)
	}
	f.waitAgentText(src.ID, "I remember 3 earlier prompts. [1] /sim instant\nfirst [2] /sim instant\nsecond [3] /sim instant\nthird")
	if n := f.visibleCount(); n != 4 {
		t.Fatalf("want 4 sessions, got %d", n)
	}
}}

// ForkLatestTurnOnly: an agent with only ACP session/fork attests a fork
// through the latest settled turn and nothing earlier.
var ForkLatestTurnOnly = Scenario{Name: "fork/through_the_latest_turn_with_acp_session_fork", Run: func(t *testing.T, d Driver) {
	f := forkFixture(t, d, host.ForkLatestTurn, "")
	src := f.createEmpty()
	turns := f.settledTurns(src.ID, "/sim instant\none", "/sim instant\ntwo")
	if mode, _ := f.host.ForkCapability(); mode != host.ForkLatestTurn {
		t.Fatalf("capability %q", mode)
	}
	_, err := f.fork(src.ID, turns[0].ID, "early")
	wantReason(t, err, host.CodeOperationConflict, host.ReasonForkNotLatest)
	// A refusal is final for its clientSubmitId and creates nothing.
	_, err = f.fork(src.ID, turns[0].ID, "early")
	wantReason(t, err, host.CodeOperationConflict, host.ReasonForkNotLatest)
	if n := f.visibleCount(); n != 1 {
		t.Fatalf("a refused fork created a session (%d visible)", n)
	}
	fk, err := f.fork(src.ID, turns[1].ID, "latest")
	if err != nil {
		t.Fatalf("fork through the latest turn: %v", err)
	}
	if fk.Title != "one (2)" || fk.TurnCount != 2 { // the derived title of the first prompt
		t.Fatalf("fork: %+v", fk)
	}
	f.waitSettled(f.mustSend(fk.ID, "fk-recall", "/sim recall"))
	f.waitAgentText(fk.ID, "I remember 2 earlier prompts. [1] /sim instant\none [2] /sim instant\ntwo")
	// Once the source moves on, the old latest turn is no longer attestable.
	f.settledTurns(src.ID, "/sim instant\nthree")
	_, err = f.fork(src.ID, turns[1].ID, "stale")
	wantReason(t, err, host.CodeOperationConflict, host.ReasonForkNotLatest)
}}

// ForkRefusedWhereUnattested: no fork capability, an unsettled fork
// point, a foreign workspace — each refused with a stable reason, nothing
// created, the source unaffected.
var ForkRefusedWhereUnattested = Scenario{Name: "fork/refused_where_the_agent_cannot_attest", Run: func(t *testing.T, d Driver) {
	f := forkFixture(t, d, host.ForkNone, "")
	src := f.createEmpty()
	turns := f.settledTurns(src.ID, "/sim instant\none")
	if mode, reason := f.host.ForkCapability(); mode != host.ForkNone || reason != host.ReasonForkUnsupported {
		t.Fatalf("capability %q %q", mode, reason)
	}
	_, err := f.fork(src.ID, turns[0].ID, "no-fork")
	wantReason(t, err, host.CodeOperationConflict, host.ReasonForkUnsupported)

	g := forkFixture(t, d, host.ForkAnyTurn, "")
	s2 := g.createEmpty()
	g.settledTurns(s2.ID, "/sim instant\nwarm up")
	hang := g.mustSend(s2.ID, "hang", "/sim hang")
	g.waitTurn(hang, "accepted", host.Turn.Accepted)
	_, err = g.fork(s2.ID, hang.ID, "unsettled")
	wantReason(t, err, host.CodeOperationConflict, host.ReasonForkNotSettled)
	_, err = g.host.ForkSession(ctx, host.ForkSessionInput{WorkspaceID: "another-ws", SessionID: s2.ID, TurnID: hang.ID, ClientSubmitID: "x"})
	wantCode(t, err, host.CodeNotFound)
	_, err = g.fork(s2.ID, "turn-missing", "missing")
	wantCode(t, err, host.CodeNotFound)
	_, err = g.fork(s2.ID, hang.ID, "")
	wantCode(t, err, host.CodeInvalidInput)
	if n := g.visibleCount(); n != 1 {
		t.Fatalf("refused forks created sessions (%d visible)", n)
	}
	if _, err := g.host.CancelTurn(ctx, host.CancelInput{WorkspaceID: ws, SessionID: s2.ID, TurnID: hang.ID}); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	g.waitSettled(hang)
}}

// SettingsUnderWorkspaceRoot: the working directory must resolve (links
// and .. included) under the root; anything else is invalid_input and
// changes nothing. A live session's runtime accepts a valid change first,
// and the session keeps working with it. Pin is canonical and fans out.
var SettingsUnderWorkspaceRoot = Scenario{Name: "settings/working_directory_stays_under_the_root", Run: func(t *testing.T, d Driver) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	outside := filepath.Join(base, "outside")
	for _, dir := range []string{filepath.Join(root, "a", "b"), outside} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	realRoot, err := host.ResolveWorkspaceRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	f := forkFixture(t, d, host.ForkAnyTurn, realRoot)

	_, err = f.host.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: ws, Settings: map[string]string{"cwd": outside}})
	wantReason(t, err, host.CodeInvalidInput, host.ReasonCwdOutsideRoot)
	r, err := f.host.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: ws, Settings: map[string]string{"cwd": "a"}})
	if err != nil || r.Session.Settings["cwd"] != filepath.Join(realRoot, "a") {
		t.Fatalf("create with a relative cwd: %+v %v", r.Session.Settings, err)
	}
	sid := r.Session.ID
	f.settledTurns(sid, "/sim instant\nhello")

	set := func(cwd string) (host.Session, error) {
		m := map[string]string{"cwd": cwd, "model": "m1"}
		return f.host.UpdateSession(ctx, host.UpdateSessionInput{WorkspaceID: ws, SessionID: sid, Settings: &m})
	}
	for _, bad := range []string{outside, "../outside", "a/../../outside", "escape", "/", filepath.Join(realRoot, "escape", ".")} {
		_, err := set(bad)
		wantReason(t, err, host.CodeInvalidInput, host.ReasonCwdOutsideRoot)
	}
	_, err = set("does-not-exist")
	wantReason(t, err, host.CodeInvalidInput, host.ReasonCwdNotDirectory)
	if s, _ := f.host.GetSession(ctx, ws, sid); s.Settings["cwd"] != filepath.Join(realRoot, "a") || s.Settings["model"] != "" {
		t.Fatalf("a refused change was persisted: %+v", s.Settings)
	}
	s, err := set("a/b/../b")
	if err != nil || s.Settings["cwd"] != filepath.Join(realRoot, "a", "b") || s.Settings["model"] != "m1" {
		t.Fatalf("valid change: %+v %v", s.Settings, err)
	}
	// The live runtime took it: the next prompt runs (in a reloaded
	// provider session that still remembers the first prompt).
	f.waitSettled(f.mustSend(sid, "after-settings", "/sim recall"))
	f.waitAgentText(sid, "I remember 1 earlier prompts. [1] /sim instant\nhello")

	// Busy: a running turn refuses the change.
	hang := f.mustSend(sid, "busy", "/sim hang")
	f.waitTurn(hang, "accepted", host.Turn.Accepted)
	_, err = set("a")
	wantReason(t, err, host.CodeSessionBusy, host.ReasonTurnInProgress)
	if _, err := f.host.CancelTurn(ctx, host.CancelInput{WorkspaceID: ws, SessionID: sid, TurnID: hang.ID}); err != nil {
		t.Fatal(err)
	}
	f.waitSettled(hang)

	// Pin: canonical metadata, published as a session change.
	n := f.obs.count(sid)
	pin := true
	p, err := f.host.UpdateSession(ctx, host.UpdateSessionInput{WorkspaceID: ws, SessionID: sid, Pinned: &pin})
	if err != nil || !p.Pinned {
		t.Fatalf("pin: %+v %v", p, err)
	}
	if got, _ := f.host.GetSession(ctx, ws, sid); !got.Pinned {
		t.Fatalf("pin not persisted")
	}
	f.host.FlushPublish()
	if f.obs.count(sid) <= n {
		t.Fatalf("pin published no session change")
	}
	_, err = f.host.UpdateSession(ctx, host.UpdateSessionInput{WorkspaceID: "another-ws", SessionID: sid, Pinned: &pin})
	wantCode(t, err, host.CodeNotFound)
}}

// ForkConcurrentTitles: forks of one family racing each other each get
// their own title number, none is lost, and the source keeps working.
var ForkConcurrentTitles = Scenario{Name: "fork/concurrent_forks_take_distinct_lineage_numbers", Run: func(t *testing.T, d Driver) {
	f := forkFixture(t, d, host.ForkAnyTurn, "")
	r, err := f.host.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: ws, Title: "Race"})
	if err != nil {
		t.Fatal(err)
	}
	turns := f.settledTurns(r.Session.ID, "/sim instant\none")
	const n = 4
	titles := make(chan string, n)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			s, err := f.fork(r.Session.ID, turns[0].ID, fmt.Sprintf("race-%d", i))
			if err != nil {
				errs <- err
				return
			}
			titles <- s.Title
		}()
	}
	seen := map[string]bool{}
	for range n {
		select {
		case err := <-errs:
			t.Fatalf("concurrent fork: %v", err)
		case title := <-titles:
			seen[title] = true
		}
	}
	for i := 2; i <= n+1; i++ {
		if !seen[fmt.Sprintf("Race (%d)", i)] {
			t.Fatalf("titles %v lack Race (%d)", seen, i)
		}
	}
}}

// lossyForker wraps a runtime's fork: lose makes the agent fork but the
// answer never arrive; dropEvidence removes one turn's identity from an
// answer that does arrive.
type lossyForker struct {
	host.Runtime
	inner        host.Forker
	calls        atomic.Int64
	lose         atomic.Bool
	dropEvidence atomic.Bool
}

func (r *lossyForker) ForkCapability() (host.ForkMode, string) { return r.inner.ForkCapability() }

func (r *lossyForker) Fork(ctx context.Context, req host.ForkRequest) (host.ForkResult, error) {
	r.calls.Add(1)
	res, err := r.inner.Fork(ctx, req)
	if err == nil && r.lose.Load() {
		return host.ForkResult{}, fmt.Errorf("conformance: the agent's answer was lost: %w", host.ErrUnavailable)
	}
	if err == nil && r.dropEvidence.Load() && len(req.ProviderTurnIDs) > 0 {
		delete(res.TurnIDs, req.ProviderTurnIDs[0])
	}
	return res, err
}

// ForkNeverRedone: a fork whose answer was lost is outcome_unknown and is
// never sent to the agent again under its id; evidence that does not cover
// every turn of the snapshot fails closed; neither leaves a session.
var ForkNeverRedone = Scenario{Name: "fork/lost_answer_is_unknown_and_incomplete_evidence_fails_closed", Run: func(t *testing.T, d Driver) {
	f := forkFixture(t, d, host.ForkAnyTurn, "")
	r, err := f.host.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: ws, Title: "Lossy"})
	if err != nil {
		t.Fatal(err)
	}
	turns := f.settledTurns(r.Session.ID, "/sim instant\none", "/sim instant\ntwo")
	lf := &lossyForker{Runtime: f.runtime, inner: f.runtime}
	h := host.New(host.Config{Store: f.store, Runtime: lf, Now: f.clock.Now})

	lf.lose.Store(true)
	_, err = h.ForkSession(ctx, host.ForkSessionInput{WorkspaceID: ws, SessionID: r.Session.ID, TurnID: turns[1].ID, ClientSubmitID: "lost"})
	wantReason(t, err, host.CodeOutcomeUnknown, host.ReasonForkDeliveryUnknown)
	lf.lose.Store(false)
	_, err = h.ForkSession(ctx, host.ForkSessionInput{WorkspaceID: ws, SessionID: r.Session.ID, TurnID: turns[1].ID, ClientSubmitID: "lost"})
	wantReason(t, err, host.CodeOutcomeUnknown, host.ReasonForkDeliveryUnknown)
	if n := lf.calls.Load(); n != 1 {
		t.Fatalf("the agent was asked %d times for one fork id", n)
	}

	lf.dropEvidence.Store(true)
	_, err = h.ForkSession(ctx, host.ForkSessionInput{WorkspaceID: ws, SessionID: r.Session.ID, TurnID: turns[1].ID, ClientSubmitID: "partial"})
	wantReason(t, err, host.CodeOperationConflict, host.ReasonForkEvidence)
	_, err = h.ForkSession(ctx, host.ForkSessionInput{WorkspaceID: ws, SessionID: r.Session.ID, TurnID: turns[1].ID, ClientSubmitID: "partial"})
	wantReason(t, err, host.CodeOperationConflict, host.ReasonForkEvidence)
	if n := f.visibleCount(); n != 1 {
		t.Fatalf("failed forks left sessions (%d visible)", n)
	}

	// A new id works; the lost and refused ones kept their numbers.
	lf.dropEvidence.Store(false)
	s, err := h.ForkSession(ctx, host.ForkSessionInput{WorkspaceID: ws, SessionID: r.Session.ID, TurnID: turns[1].ID, ClientSubmitID: "fresh"})
	if err != nil || s.Title != "Lossy (4)" {
		t.Fatalf("fork after the failures: %+v %v", s, err)
	}
}}

// ForkLeavesSubagentSessions: a fork is one independent root session; the
// sub-agent sessions its source spawned at or before the fork point stay
// with the source (docs/protocol.md "Fork and sub-agent sessions"): the
// target has no children, the source's tree is unchanged, and a sub-agent
// session itself is refused as a source.
var ForkLeavesSubagentSessions = Scenario{Name: "fork/subagent_sessions_stay_with_the_source", Run: func(t *testing.T, d Driver) {
	f := forkFixture(t, d, host.ForkAnyTurn, "")
	src := f.createEmpty()
	child := f.withSubagent(src.ID, "fsa-1")
	turns := f.settledTurns(src.ID, "/sim instant\nafter the sub-agent")
	treeBefore, err := f.store.SessionTree(ctx, ws, src.ID)
	if err != nil || len(treeBefore) != 2 {
		t.Fatalf("source tree: %d sessions, %v", len(treeBefore), err)
	}
	fk, err := f.fork(src.ID, turns[0].ID, "fsa-fork")
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	tree, err := f.store.SessionTree(ctx, ws, fk.ID)
	if err != nil || len(tree) != 1 || tree[0].Session.ID != fk.ID || fk.ParentID != "" || fk.RootID != fk.ID {
		t.Fatalf("fork tree: %+v %v", tree, err)
	}
	if fk.TurnCount != turns[0].Seq {
		t.Fatalf("fork turn count %d, want %d (the parent's turns through the point)", fk.TurnCount, turns[0].Seq)
	}
	after, err := f.store.SessionTree(ctx, ws, src.ID)
	if err != nil || len(after) != 2 {
		t.Fatalf("source tree after the fork: %d sessions, %v", len(after), err)
	}
	ct := f.storeTurns(child.ID)
	_, err = f.fork(child.ID, ct[len(ct)-1].ID, "fsa-child")
	wantReason(t, err, host.CodeOperationConflict, host.ReasonForkSubagent)
}}

// ForkStartsWithoutGoal: a fork is a new independent session, so it does
// not take over the source's goal (docs/protocol.md): its goal starts
// empty, and the source's goal, running when the fork is made, is left
// byte-for-byte as it was.
var ForkStartsWithoutGoal = Scenario{Name: "fork/target_starts_without_the_source_goal", Run: func(t *testing.T, d Driver) {
	f := forkFixture(t, d, host.ForkAnyTurn, "")
	src := f.createEmpty()
	turns := f.settledTurns(src.ID, "/sim instant\nfirst")
	f.mustGoal(src.ID, "fg-1", host.GoalActionSet, &host.GoalSpec{Objective: "/sim hang\nKeep going", MaxTurns: 5}, "alice")
	run := f.waitGoalTurnRunning(src.ID)
	goalBefore := f.goalBytes(src.ID)
	fk, err := f.fork(src.ID, turns[0].ID, "fg-fork")
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	g, err := f.host.GetGoal(ctx, ws, fk.ID)
	if err != nil && host.CodeOf(err) != host.CodeNotFound || err == nil && (g.Goal != nil || g.Held) {
		t.Fatalf("fork's goal: %+v %v", g, err)
	}
	if _, err := f.store.GetGoal(ctx, ws, fk.ID); !errors.Is(err, host.ErrNotFound) {
		t.Fatalf("a goal record exists for the fork: %v", err)
	}
	if got := f.goalBytes(src.ID); !bytes.Equal(goalBefore, got) {
		t.Fatalf("the fork changed the source goal:\nbefore %s\nafter  %s", goalBefore, got)
	}
	f.mustGoal(src.ID, "fg-2", host.GoalActionClear, nil, "alice")
	f.waitSettled(run)
}}
