package conformance

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// Queue scenarios (issue 12, seed 003): one admission path, a canonical
// queue, retract against the pull, interrupt fences, terminal handoff.

func QueueScenarios() []Scenario {
	return []Scenario{
		QueueIdleSubmitStartsOneTurn,
		QueueBusySubmitSteersOrFollows,
		QueueRetryAnswersFromTheStore,
		QueueSameIDDifferentContentConflicts,
		QueueRetractRacesThePull,
		QueueRetractRules,
		QueueInterruptFence,
		QueueTerminalHandoffNoIdleWindow,
		QueueCrashKeepsEveryEntryExact,
		QueueSteeringUnsupportedNeverDropped,
		QueueConflictLeavesNoPoisonedAdmission,
		QueueRetryKeepsAdmissionRevision,
		QueueFollowupNeverDeliveredAsSteering,
		QueueContentKeepsQuotesAndAttachments,
		QueueInterruptBeforeStartIsExact,
		QueueInterruptRedeliversFailedStop,
		QueueConcurrentInterruptsOneTerminal,
		QueueRetractRacesHandoff,
		QueueReservedIDsRefused,
		QueueLostPullAckDeliversOnce,
		QueueLostAdmissionAckAnswersFromStore,
		QueueUnprovablePullFailStops,
		QueueInternalFollowUpRacingQueueStaysScoped,
	}
}

func (r *probeRuntime) SupportsSteering(ws, sid string) bool {
	r.mu.Lock()
	off := r.noSteering
	r.mu.Unlock()
	return !off && r.Runtime.SupportsSteering(ws, sid)
}

func (r *probeRuntime) SteeringReady(ctx context.Context, ref host.TurnRef) error {
	r.mu.Lock()
	mute := r.muteSteering
	r.mu.Unlock()
	if mute {
		return nil
	}
	return r.notifySteering(ctx, ref)
}

// notifySteering delivers a steering notice to the inner runtime.
func (r *probeRuntime) notifySteering(ctx context.Context, ref host.TurnRef) error {
	return r.Runtime.SteeringReady(ctx, ref)
}

func (f *fixture) submit(in host.SendInput) (host.SendResult, error) {
	in.WorkspaceID = ws
	if in.SubmittedBy == "" {
		in.SubmittedBy = "alice"
	}
	return f.host.SendInput(ctx, in)
}

func (f *fixture) mustQueue(sessionID, id, text string, p host.Placement, want host.Disposition) host.QueueEntry {
	f.t.Helper()
	r, err := f.submit(host.SendInput{SessionID: sessionID, ClientSubmitID: id, Content: host.MessageContent{Text: text}, Placement: p})
	if err != nil {
		f.t.Fatalf("submit %q: %v", text, err)
	}
	if r.Disposition != want || r.Entry == nil || r.QueueRevision == 0 {
		f.t.Fatalf("submit %q: disposition %s entry %+v revision %d, want %s", text, r.Disposition, r.Entry, r.QueueRevision, want)
	}
	return *r.Entry
}

func (f *fixture) entry(sessionID, id string) host.QueueEntry {
	f.t.Helper()
	e, err := f.store.GetQueueEntry(ctx, ws, sessionID, id)
	if err != nil {
		f.t.Fatalf("entry %s: %v", id, err)
	}
	return e
}

func (f *fixture) waitEntry(sessionID, id string, ok func(host.QueueEntry) bool) host.QueueEntry {
	f.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		e, err := f.store.GetQueueEntry(ctx, ws, sessionID, id)
		if err == nil && ok(e) {
			return e
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("entry %s never reached the expected state (last %+v, %v)", id, e, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (f *fixture) cancel(t host.Turn) host.Turn {
	f.t.Helper()
	if _, err := f.host.CancelTurn(ctx, host.CancelInput{WorkspaceID: ws, SessionID: t.SessionID, TurnID: t.ID, Wait: 10 * time.Second}); err != nil {
		f.t.Fatal(err)
	}
	return f.waitSettled(t)
}

func (f *fixture) turns(sessionID string) []host.Turn {
	f.t.Helper()
	p, err := f.host.ListSessionTurns(ctx, ws, sessionID, host.TurnQuery{Limit: 200})
	if err != nil {
		f.t.Fatal(err)
	}
	slices.Reverse(p.Turns) // oldest first
	return p.Turns
}

// userTexts lists the user messages of a turn, in order.
func (f *fixture) userTexts(sessionID, turnID string) []string {
	var out []string
	for _, m := range f.messages(sessionID, host.MessageQuery{TurnID: turnID, Limit: 1000}) {
		if m.Role == host.RoleUser {
			out = append(out, m.Content.Text)
		}
	}
	return out
}

var QueueIdleSubmitStartsOneTurn = Scenario{"queue/idle_submit_starts_one_turn", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	for _, p := range []host.Placement{host.PlacementNextTurn, host.PlacementCurrentTurn} {
		r, err := f.submit(host.SendInput{SessionID: s.ID, ClientSubmitID: "idle-" + string(p), Content: host.MessageContent{Text: "/sim words=3"}, Placement: p})
		if err != nil || r.Disposition != host.DispositionTurnStarted || r.Turn == nil || r.Entry != nil {
			t.Fatalf("idle submit (%s): %+v %v", p, r, err)
		}
		f.waitSettled(*r.Turn)
	}
	if n := f.runtime.dispatches.Load(); n != 2 {
		t.Fatalf("dispatches = %d, want 2", n)
	}
	if q, _ := f.host.Queue(ctx, ws, s.ID); q.Revision != 0 || len(q.Entries) != 0 {
		t.Fatalf("an idle submit touched the queue: %+v", q)
	}
}}

var QueueBusySubmitSteersOrFollows = Scenario{"queue/busy_submit_steers_or_follows", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	run := f.mustSend(s.ID, "run", "/sim hang")
	f.waitTurn(run, "accepted", host.Turn.Accepted)
	steer := f.mustQueue(s.ID, "steer", "use tabs, not spaces", host.PlacementCurrentTurn, host.DispositionSteering)
	if steer.TargetTurnID != run.ID || steer.Author != "alice" {
		t.Fatalf("steering entry: %+v", steer)
	}
	// The sim agent pulls at its next pull point and answers in the turn.
	f.waitAgentContains(s.ID, `"use tabs, not spaces" — taking it into account.]`)
	if e := f.entry(s.ID, steer.ID); e.State != host.QueuePulled || e.TurnID != run.ID {
		t.Fatalf("steering after pull: %+v", e)
	}
	if got := f.userTexts(s.ID, run.ID); !slices.Equal(got, []string{"/sim hang", "use tabs, not spaces"}) {
		t.Fatalf("user messages of the running turn: %q", got)
	}
	follow := f.mustQueue(s.ID, "follow", "/sim words=4", host.PlacementNextTurn, host.DispositionFollowup)
	q, err := f.host.Queue(ctx, ws, s.ID)
	if err != nil || len(q.Entries) != 1 || q.Entries[0].ID != follow.ID || q.Revision < follow.AdmittedRevision {
		t.Fatalf("queue while busy: %+v %v", q, err)
	}
	if f.runtime.dispatches.Load() != 1 {
		t.Fatal("a queued submit dispatched")
	}
	f.cancel(run)
	// The follow-up starts by itself as the next turn.
	e := f.waitEntry(s.ID, follow.ID, func(e host.QueueEntry) bool { return e.State == host.QueueDone })
	next, err := f.host.GetTurn(ctx, ws, s.ID, e.TurnID)
	if err != nil || next.Seq != run.Seq+1 || next.Outcome != host.OutcomeCompleted || next.SubmittedBy != "alice" {
		t.Fatalf("follow-up turn: %+v %v", next, err)
	}
	if got := f.userTexts(s.ID, next.ID); !slices.Equal(got, []string{"/sim words=4"}) {
		t.Fatalf("follow-up prompt: %q", got)
	}
	if e := f.entry(s.ID, steer.ID); e.State != host.QueueDone {
		t.Fatalf("steering after its turn ended: %s", e.State)
	}
	if n := f.runtime.dispatches.Load(); n != 2 {
		t.Fatalf("dispatches = %d, want 2", n)
	}
	// Prompts, steering and the follow-up reach hubs as typed deltas like
	// the agent's words: the deltas alone rebuild the whole transcript.
	f.host.FlushPublish()
	checkDeltas(t, f.obs.transcriptDeltas(s.ID), f.messages(s.ID, host.MessageQuery{Limit: 1000}))
	checkTypedTurns(t, f, s.ID)
	// The follow-up was admitted by the settlement: the tree moved to it.
	if tree := f.treeFacts(next.ID, host.PhaseQueued); len(tree) != 1 || tree[0].TurnID != next.ID {
		t.Fatalf("follow-up admission tree facts %+v, want one naming %s", tree, next.ID)
	}
}}

var QueueRetryAnswersFromTheStore = Scenario{"queue/same_id_retry_same_result_any_host_after_restart", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	run := f.mustSend(s.ID, "run", "/sim hang")
	first := f.mustQueue(s.ID, "q-1", "later please", host.PlacementNextTurn, host.DispositionFollowup)
	// Another Host (another connection, another replica) on the same store.
	other := host.New(host.Config{Store: f.open(t), Runtime: f.d.NewRuntime(t), Now: f.clock.Now})
	for i, h := range []*host.Host{f.host, other} {
		r, err := h.SendInput(ctx, host.SendInput{WorkspaceID: ws, SessionID: s.ID, ClientSubmitID: "q-1",
			Content: host.MessageContent{Text: "later please"}, Placement: host.PlacementNextTurn, SubmittedBy: "alice"})
		if err != nil || !r.Replayed || r.Disposition != host.DispositionFollowup || r.Entry.ID != first.ID || r.QueueRevision != first.AdmittedRevision {
			t.Fatalf("retry %d: %+v %v", i, r, err)
		}
	}
	f.crash() // the running turn dies with the process; its successor runs
	f.continueFresh(s.ID)
	r, err := f.submit(host.SendInput{SessionID: s.ID, ClientSubmitID: "q-1", Content: host.MessageContent{Text: "later please"}, Placement: host.PlacementNextTurn})
	if err != nil || r.Entry == nil || r.Entry.ID != first.ID || r.QueueRevision != first.AdmittedRevision {
		t.Fatalf("retry after restart: %+v %v", r, err)
	}
	e := f.waitEntry(s.ID, first.ID, func(e host.QueueEntry) bool { return e.State == host.QueueDone })
	if q, _ := f.host.Queue(ctx, ws, s.ID); len(q.Entries) != 0 {
		t.Fatalf("queue after the follow-up ran: %+v", q)
	}
	turns := f.turns(s.ID)
	if len(turns) != 2 || turns[0].ID != run.ID || turns[1].ID != e.TurnID {
		t.Fatalf("turns: %+v", turns)
	}
}}

var QueueSameIDDifferentContentConflicts = Scenario{"queue/same_id_different_content_conflicts", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	run := f.mustSend(s.ID, "run", "/sim hang")
	f.mustQueue(s.ID, "q-2", "first", host.PlacementNextTurn, host.DispositionFollowup)
	before, _ := f.host.Queue(ctx, ws, s.ID)
	_, err := f.submit(host.SendInput{SessionID: s.ID, ClientSubmitID: "q-2", Content: host.MessageContent{Text: "second"}, Placement: host.PlacementNextTurn})
	wantCode(t, err, host.CodeOperationConflict)
	// A turn's id reused for a queue entry conflicts too.
	_, err = f.submit(host.SendInput{SessionID: s.ID, ClientSubmitID: "run", Content: host.MessageContent{Text: "other"}, Placement: host.PlacementNextTurn})
	wantCode(t, err, host.CodeOperationConflict)
	// A queue entry's id cannot create a session either.
	_, err = f.host.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: ws, ClientSubmitID: "q-2",
		Content: &host.MessageContent{Text: "first"}, CreatedBy: "alice"})
	wantCode(t, err, host.CodeOperationConflict)
	after, _ := f.host.Queue(ctx, ws, s.ID)
	if after.Revision != before.Revision || len(after.Entries) != 1 {
		t.Fatalf("a conflicting submit changed the queue: %+v → %+v", before, after)
	}
	f.cancel(run)
}}

var QueueRetractRacesThePull = Scenario{"queue/retract_races_the_pull_exactly_one_wins", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	f.runtime.set(func(r *probeRuntime) { r.muteSteering = true })
	run := f.mustSend(s.ID, "run", "/sim hang")
	f.waitTurn(run, "accepted", host.Turn.Accepted)
	ref := host.TurnRef{WorkspaceID: ws, SessionID: s.ID, TurnID: run.ID}
	retracted, pulled := 0, 0
	for i := range 8 {
		text := fmt.Sprintf("steer number %d", i)
		e := f.mustQueue(s.ID, fmt.Sprintf("race-%d", i), text, host.PlacementCurrentTurn, host.DispositionSteering)
		var wg sync.WaitGroup
		var rerr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, rerr = f.host.RetractQueued(ctx, host.RetractInput{WorkspaceID: ws, SessionID: s.ID, EntryID: e.ID, By: "alice"})
		}()
		go func() { defer wg.Done(); _ = f.runtime.notifySteering(ctx, ref) }()
		wg.Wait()
		if rerr == nil {
			retracted++
			// Give a pull that lost the race time to (not) deliver it.
			time.Sleep(50 * time.Millisecond)
			if strings.Contains(agentTextOf(f.messages(s.ID, host.MessageQuery{Limit: 1000}), run.ID), text) {
				t.Fatalf("entry %d was retracted and delivered", i)
			}
			if got := f.entry(s.ID, e.ID); got.State != host.QueueRetracted {
				t.Fatalf("retracted entry state %s", got.State)
			}
			continue
		}
		if host.CodeOf(rerr) != host.CodeOperationConflict || !strings.Contains(rerr.Error(), "agent already took") {
			t.Fatalf("retract %d: %v", i, rerr)
		}
		pulled++
		f.waitAgentContains(s.ID, fmt.Sprintf("%q — taking it into account.]", text))
	}
	t.Logf("retract won %d, pull won %d", retracted, pulled)
	f.cancel(run)
	// Exactly-once: every delivered entry appears once in the transcript.
	all := agentTextOf(f.messages(s.ID, host.MessageQuery{Limit: 1000}), run.ID)
	for i := range 8 {
		if n := strings.Count(all, fmt.Sprintf("%q", fmt.Sprintf("steer number %d", i))); n > 1 {
			t.Fatalf("entry %d delivered %d times", i, n)
		}
	}
}}

var QueueRetractRules = Scenario{"queue/retract_own_or_admin_and_after_cut_conflicts", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	run := f.mustSend(s.ID, "run", "/sim hang")
	a := f.mustQueue(s.ID, "r-1", "one", host.PlacementNextTurn, host.DispositionFollowup)
	b := f.mustQueue(s.ID, "r-2", "two", host.PlacementNextTurn, host.DispositionFollowup)
	_, err := f.host.RetractQueued(ctx, host.RetractInput{WorkspaceID: ws, SessionID: s.ID, EntryID: a.ID, By: "bob"})
	wantCode(t, err, host.CodeForbidden)
	res, err := f.host.RetractQueued(ctx, host.RetractInput{WorkspaceID: ws, SessionID: s.ID, EntryID: a.ID, By: "alice"})
	if err != nil || res.Entry.State != host.QueueRetracted || res.QueueRevision <= b.AdmittedRevision {
		t.Fatalf("own retract: %+v %v", res, err)
	}
	if again, err := f.host.RetractQueued(ctx, host.RetractInput{WorkspaceID: ws, SessionID: s.ID, EntryID: a.ID, By: "alice"}); err != nil || again.QueueRevision != res.QueueRevision {
		t.Fatalf("repeated retract: %+v %v", again, err)
	}
	_, err = f.host.RetractQueued(ctx, host.RetractInput{WorkspaceID: ws, SessionID: "other", EntryID: b.ID, By: "alice"})
	wantCode(t, err, host.CodeNotFound)
	f.cancel(run)
	e := f.waitEntry(s.ID, b.ID, func(e host.QueueEntry) bool { return e.State != host.QueueQueued })
	_, err = f.host.RetractQueued(ctx, host.RetractInput{WorkspaceID: ws, SessionID: s.ID, EntryID: b.ID, By: "carol", Admin: true})
	wantCode(t, err, host.CodeOperationConflict)
	if !strings.Contains(err.Error(), e.TurnID) {
		t.Fatalf("conflict does not say which turn took it: %v", err)
	}
	// The retracted entry never ran.
	for _, tr := range f.turns(s.ID) {
		if slices.Contains(f.userTexts(s.ID, tr.ID), "one") {
			t.Fatalf("retracted entry ran in turn %s", tr.ID)
		}
	}
	// An admin may retract anyone's waiting entry.
	f.waitSettled(host.Turn{WorkspaceID: ws, SessionID: s.ID, ID: e.TurnID})
	run2 := f.mustSend(s.ID, "run-2", "/sim hang")
	c := f.mustQueue(s.ID, "r-3", "three", host.PlacementNextTurn, host.DispositionFollowup)
	if _, err := f.host.RetractQueued(ctx, host.RetractInput{WorkspaceID: ws, SessionID: s.ID, EntryID: c.ID, By: "carol", Admin: true}); err != nil {
		t.Fatalf("admin retract: %v", err)
	}
	f.cancel(run2)
}}

var QueueInterruptFence = Scenario{"queue/interrupt_fence_keeps_later_entries_out", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	run := f.mustSend(s.ID, "run", "/sim hang")
	f.waitTurn(run, "accepted", host.Turn.Accepted)
	// The first stop is lost on the way to the agent, so the turn keeps
	// running after the fence committed (the reconciler redelivers it).
	f.runtime.set(func(r *probeRuntime) { r.failCancels = 1 })
	type answer struct {
		res host.InterruptResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		r, err := f.host.InterruptTurn(ctx, host.InterruptInput{WorkspaceID: ws, SessionID: s.ID, TurnID: run.ID, By: "bob", Wait: 15 * time.Second})
		done <- answer{r, err}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		q, err := f.host.Queue(ctx, ws, s.ID)
		if err == nil && q.FenceTurnID == run.ID {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fence never committed: %+v %v", q, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if tr, _ := f.host.GetTurn(ctx, ws, s.ID, run.ID); tr.Settled() {
		t.Skip("the turn ended before the late submits; nothing to prove")
	}
	_, err := f.submit(host.SendInput{SessionID: s.ID, ClientSubmitID: "late-steer", Content: host.MessageContent{Text: "too late to steer"}, Placement: host.PlacementCurrentTurn})
	wantCode(t, err, host.CodeNotDispatched)
	if !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("refusal does not say why: %v", err)
	}
	late := f.mustQueue(s.ID, "late-follow", "/sim words=2", host.PlacementNextTurn, host.DispositionFollowup)
	r, err := f.submit(host.SendInput{SessionID: s.ID, ClientSubmitID: "late-steer-2", Content: host.MessageContent{Text: "/sim words=3"}, Placement: host.PlacementCurrentTurn, AllowFollowup: true})
	if err != nil || r.Disposition != host.DispositionFollowup {
		t.Fatalf("fenced steering with allowFollowup: %+v %v", r, err)
	}
	a := <-done
	if a.err != nil || a.res.Turn.ID != run.ID || !a.res.Turn.Settled() || a.res.Turn.Outcome != host.OutcomeCanceled {
		t.Fatalf("interrupt: %+v %v", a.res, a.err)
	}
	if got := f.userTexts(s.ID, run.ID); !slices.Equal(got, []string{"/sim hang"}) {
		t.Fatalf("the stopped turn received later input: %q", got)
	}
	e := f.waitEntry(s.ID, late.ID, func(e host.QueueEntry) bool { return e.State == host.QueueDone })
	if e.TurnID == run.ID {
		t.Fatal("the follow-up ran in the stopped turn")
	}
	f.waitEntry(s.ID, r.Entry.ID, func(e host.QueueEntry) bool { return e.State == host.QueueDone })
}}

var QueueTerminalHandoffNoIdleWindow = Scenario{"queue/terminal_handoff_no_idle_window_order_kept", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	first := f.mustSend(s.ID, "first", "/sim words=40")
	// Late submits from several clients race the turn's end. Each must
	// queue behind whatever runs, or start a turn only when nothing waits.
	const clients, each = 4, 4
	var wg sync.WaitGroup
	var mu sync.Mutex
	var results []host.SendResult
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				r, err := f.submit(host.SendInput{SessionID: s.ID, ClientSubmitID: fmt.Sprintf("late-%d-%d", c, i),
					Content: host.MessageContent{Text: fmt.Sprintf("/sim words=2 late %d %d", c, i)}, Placement: host.PlacementNextTurn})
				if err != nil {
					t.Errorf("late submit %d/%d: %v", c, i, err)
					return
				}
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
				time.Sleep(time.Duration(c+1) * 7 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// Every follow-up runs, each in its own successor, in queue order.
	var entries []host.QueueEntry
	for _, r := range results {
		if r.Entry != nil {
			entries = append(entries, f.waitEntry(s.ID, r.Entry.ID, func(e host.QueueEntry) bool { return e.State == host.QueueDone }))
		} else {
			f.waitSettled(*r.Turn)
		}
	}
	f.waitSettled(first)
	turns := f.turns(s.ID)
	if len(turns) != 1+clients*each {
		t.Fatalf("%d turns for %d submissions", len(turns), 1+clients*each)
	}
	for i := 1; i < len(turns); i++ {
		prev, cur := turns[i-1], turns[i]
		if !prev.Settled() || !cur.Settled() || cur.CreatedAt.Before(*prev.SettledAt) {
			t.Fatalf("turn %d started before turn %d ended (overlap or not settled): %+v / %+v", cur.Seq, prev.Seq, prev, cur)
		}
	}
	slices.SortFunc(entries, func(a, b host.QueueEntry) int { return int(a.Position - b.Position) })
	bySeq := map[string]int64{}
	for _, tr := range turns {
		bySeq[tr.ID] = tr.Seq
	}
	for i := 1; i < len(entries); i++ {
		if bySeq[entries[i].TurnID] <= bySeq[entries[i-1].TurnID] {
			t.Fatalf("entry at position %d ran before position %d", entries[i].Position, entries[i-1].Position)
		}
	}
	// A submit that started a turn directly found nothing waiting.
	for _, r := range results {
		if r.Turn != nil && r.Entry == nil {
			for _, e := range entries {
				if e.CreatedAt.Before(r.Turn.CreatedAt) && bySeq[e.TurnID] > r.Turn.Seq {
					t.Fatalf("turn %d jumped ahead of waiting entry %d", r.Turn.Seq, e.Position)
				}
			}
		}
	}
	if n := f.runtime.dispatches.Load(); n != int64(len(turns)) {
		t.Fatalf("dispatches = %d for %d turns", n, len(turns))
	}
}}

var QueueCrashKeepsEveryEntryExact = Scenario{"queue/crash_every_entry_delivered_once_or_unknown", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	run := f.mustSend(s.ID, "run", "/sim hang")
	f.waitTurn(run, "accepted", host.Turn.Accepted)
	// Pulled (delivered) before the crash.
	steer := f.mustQueue(s.ID, "c-steer", "pulled before the crash", host.PlacementCurrentTurn, host.DispositionSteering)
	f.waitEntry(s.ID, steer.ID, func(e host.QueueEntry) bool { return e.State == host.QueuePulled })
	// Admitted, never pulled: the agent is not told before the crash.
	f.runtime.set(func(r *probeRuntime) { r.muteSteering = true })
	unpulled := f.mustQueue(s.ID, "c-unpulled", "/sim words=2 unpulled", host.PlacementCurrentTurn, host.DispositionSteering)
	follow := f.mustQueue(s.ID, "c-follow", "/sim words=2 follow", host.PlacementNextTurn, host.DispositionFollowup)
	f.crash()
	f.continueFresh(s.ID)
	// Recovery settles the running turn unknown: the pulled entry is
	// unknown (never run again); the unpulled steering folds ahead of the
	// follow-up into one successor, which runs once.
	e := f.waitEntry(s.ID, steer.ID, func(e host.QueueEntry) bool { return e.State == host.QueueUnknown })
	if e.TurnID != run.ID {
		t.Fatalf("pulled entry: %+v", e)
	}
	u := f.waitEntry(s.ID, unpulled.ID, func(e host.QueueEntry) bool { return e.State == host.QueueDone })
	fo := f.waitEntry(s.ID, follow.ID, func(e host.QueueEntry) bool { return e.State == host.QueueDone })
	if u.TurnID != fo.TurnID || u.TurnID == run.ID {
		t.Fatalf("unpulled steering and follow-up: %+v / %+v", u, fo)
	}
	if got := f.userTexts(s.ID, u.TurnID); !slices.Equal(got, []string{"/sim words=2 unpulled", "/sim words=2 follow"}) {
		t.Fatalf("successor prompt order: %q", got)
	}
	turns := f.turns(s.ID)
	if len(turns) != 2 {
		t.Fatalf("turns after crash: %d", len(turns))
	}
	for _, tr := range turns {
		if slices.Contains(f.userTexts(s.ID, tr.ID), "pulled before the crash") && tr.ID != run.ID {
			t.Fatal("a pulled entry ran again after the crash")
		}
	}
	if n := f.runtime.dispatches.Load(); n != 1 {
		t.Fatalf("dispatches after restart = %d, want 1", n)
	}
}}

var QueueSteeringUnsupportedNeverDropped = Scenario{"queue/steering_without_capability_refused_or_followup", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	f.runtime.set(func(r *probeRuntime) { r.noSteering = true })
	run := f.mustSend(s.ID, "run", "/sim hang")
	before, _ := f.host.Queue(ctx, ws, s.ID)
	_, err := f.submit(host.SendInput{SessionID: s.ID, ClientSubmitID: "ns-1", Content: host.MessageContent{Text: "steer me"}, Placement: host.PlacementCurrentTurn})
	wantCode(t, err, host.CodeNotDispatched)
	if !strings.Contains(err.Error(), "cannot take input into a running turn") {
		t.Fatalf("refusal reason: %v", err)
	}
	if after, _ := f.host.Queue(ctx, ws, s.ID); after.Revision != before.Revision {
		t.Fatal("a refused steering submit changed the queue")
	}
	r, err := f.submit(host.SendInput{SessionID: s.ID, ClientSubmitID: "ns-2", Content: host.MessageContent{Text: "/sim words=2"}, Placement: host.PlacementCurrentTurn, AllowFollowup: true})
	if err != nil || r.Disposition != host.DispositionFollowup {
		t.Fatalf("steering with allowFollowup: %+v %v", r, err)
	}
	// The refused id stays free: nothing was claimed.
	r2, err := f.submit(host.SendInput{SessionID: s.ID, ClientSubmitID: "ns-1", Content: host.MessageContent{Text: "steer me"}, Placement: host.PlacementNextTurn})
	if err != nil || r2.Disposition != host.DispositionFollowup {
		t.Fatalf("reusing the refused id: %+v %v", r2, err)
	}
	f.cancel(run)
	f.waitEntry(s.ID, r.Entry.ID, func(e host.QueueEntry) bool { return e.State == host.QueueDone })
	f.waitEntry(s.ID, r2.Entry.ID, func(e host.QueueEntry) bool { return e.State == host.QueueDone })
}}

// Seed 003 review: "admitRootTurn() persists the admission before
// reserving its source-message proofs … leaves the conflicting admission
// on disk, and subsequent recovery remains poisoned."
var QueueConflictLeavesNoPoisonedAdmission = Scenario{"queue/review_conflicting_identity_leaves_no_poisoned_admission", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	other := f.createEmpty()
	run := f.mustSend(s.ID, "run", "/sim hang")
	orun := f.mustSend(other.ID, "orun", "/sim hang")
	f.mustQueue(s.ID, "shared-id", "mine", host.PlacementNextTurn, host.DispositionFollowup)
	before, _ := f.host.Queue(ctx, ws, other.ID)
	_, err := f.submit(host.SendInput{SessionID: other.ID, ClientSubmitID: "shared-id", Content: host.MessageContent{Text: "mine"}, Placement: host.PlacementNextTurn})
	wantCode(t, err, host.CodeOperationConflict)
	after, _ := f.host.Queue(ctx, ws, other.ID)
	if after.Revision != before.Revision || len(after.Entries) != 0 {
		t.Fatalf("the conflicting admission left state behind: %+v", after)
	}
	if got := f.userTexts(other.ID, orun.ID); len(got) != 1 {
		t.Fatalf("the conflicting admission wrote messages: %q", got)
	}
	rep := f.crash() // recovery is not poisoned by the conflict
	if len(rep.Quarantined) != 0 {
		t.Fatalf("recovery quarantined: %+v", rep.Quarantined)
	}
	f.waitSettled(run)
	f.waitSettled(orun)
	if turns := f.turns(other.ID); len(turns) != 1 {
		t.Fatalf("the other session got %d turns", len(turns))
	}
}}

// Seed 003 review: "Old-Epoch durable proofs establish payload and
// disposition, but not the original queueRevision. Returning the current
// in-memory revision or 0 invents part of the result."
var QueueRetryKeepsAdmissionRevision = Scenario{"queue/review_retry_after_restart_returns_the_admitted_revision", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	f.mustSend(s.ID, "run", "/sim hang")
	e := f.mustQueue(s.ID, "rev-1", "one", host.PlacementNextTurn, host.DispositionFollowup)
	f.mustQueue(s.ID, "rev-2", "two", host.PlacementNextTurn, host.DispositionFollowup)
	f.mustQueue(s.ID, "rev-3", "three", host.PlacementNextTurn, host.DispositionFollowup)
	f.stopOps() // keep the queue still across the restart
	h2 := host.New(host.Config{Store: f.open(t), Runtime: f.d.NewRuntime(t), Now: f.clock.Now})
	r, err := h2.SendInput(ctx, host.SendInput{WorkspaceID: ws, SessionID: s.ID, ClientSubmitID: "rev-1",
		Content: host.MessageContent{Text: "one"}, Placement: host.PlacementNextTurn, SubmittedBy: "alice"})
	q, _ := h2.Queue(ctx, ws, s.ID)
	if err != nil || r.QueueRevision != e.AdmittedRevision || q.Revision == e.AdmittedRevision {
		t.Fatalf("retry on a new epoch: revision %d (admitted %d, current %d) %v", r.QueueRevision, e.AdmittedRevision, q.Revision, err)
	}
}}

// Seed 003 review: "decodeFollowupMessages() … accepts a follow-up entry
// with placement: current_turn." A follow-up is never pulled as steering.
var QueueFollowupNeverDeliveredAsSteering = Scenario{"queue/review_followup_never_delivered_as_steering", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	run := f.mustSend(s.ID, "run", "/sim hang")
	f.waitTurn(run, "accepted", host.Turn.Accepted)
	follow := f.mustQueue(s.ID, "nf", "/sim words=2 not steering", host.PlacementNextTurn, host.DispositionFollowup)
	steer := f.mustQueue(s.ID, "ns", "real steering", host.PlacementCurrentTurn, host.DispositionSteering)
	f.waitEntry(s.ID, steer.ID, func(e host.QueueEntry) bool { return e.State == host.QueuePulled })
	if e := f.entry(s.ID, follow.ID); e.State != host.QueueQueued {
		t.Fatalf("the pull took a follow-up: %+v", e)
	}
	f.cancel(run)
	e := f.waitEntry(s.ID, follow.ID, func(e host.QueueEntry) bool { return e.State == host.QueueDone })
	if e.TurnID == run.ID {
		t.Fatal("the follow-up ran in the running turn")
	}
}}

// Seed 003 review: "The canonical Host MessageContent omits the structured
// QuoteRef[] … would have to drop them or flatten them."
var QueueContentKeepsQuotesAndAttachments = Scenario{"queue/review_entry_content_keeps_quotes_and_attachments", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	run := f.mustSend(s.ID, "run", "/sim hang")
	content := host.MessageContent{Text: "/sim words=2 look", DisplayText: "look at this",
		Quotes:      []host.Quote{{Text: "quoted line"}},
		Attachments: []host.AttachmentRef{{ID: "att-1", Name: "a.txt", MediaType: "text/plain", Size: 3}}}
	r, err := f.submit(host.SendInput{SessionID: s.ID, ClientSubmitID: "qc", Content: content, Placement: host.PlacementNextTurn})
	if err != nil {
		t.Fatal(err)
	}
	norm, _ := content.Normalize()
	if e := f.entry(s.ID, r.Entry.ID); e.Content.Digest() != norm.Digest() {
		t.Fatalf("entry content changed: %+v", e.Content)
	}
	f.cancel(run)
	e := f.waitEntry(s.ID, r.Entry.ID, func(e host.QueueEntry) bool { return e.State == host.QueueDone })
	var got *host.Message
	for _, m := range f.messages(s.ID, host.MessageQuery{TurnID: e.TurnID}) {
		if m.Role == host.RoleUser {
			got = &m
		}
	}
	if got == nil || got.Content.Digest() != norm.Digest() {
		t.Fatalf("the follow-up turn's message lost content: %+v", got)
	}
}}

// Seed 003 review: "A stop committed before onRunStarted still cannot
// cancel setup …" — an interrupt of a turn admitted but not yet sent to
// the agent is exact: the turn settles canceled and is never dispatched.
var QueueInterruptBeforeStartIsExact = Scenario{"queue/review_interrupt_before_start_is_exact", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	run := f.mustSend(s.ID, "run", "/sim hang")
	follow := f.mustQueue(s.ID, "bs", "/sim words=2", host.PlacementNextTurn, host.DispositionFollowup)
	f.waitTurn(run, "accepted", host.Turn.Accepted)
	f.runtime.set(func(r *probeRuntime) { r.startErr = fmt.Errorf("conformance: agent start stalls") })
	f.cancel(run)
	e := f.waitEntry(s.ID, follow.ID, func(e host.QueueEntry) bool { return e.State == host.QueueStarted })
	succ, err := f.host.GetTurn(ctx, ws, s.ID, e.TurnID)
	if err != nil || succ.Phase != host.PhaseQueued {
		t.Fatalf("successor before start: %+v %v", succ, err)
	}
	res, err := f.host.InterruptTurn(ctx, host.InterruptInput{WorkspaceID: ws, SessionID: s.ID, TurnID: succ.ID, Wait: 10 * time.Second})
	if err != nil || res.Turn.Outcome != host.OutcomeCanceled || res.Turn.ProviderTurnID != "" {
		t.Fatalf("interrupt before start: %+v %v", res, err)
	}
	f.runtime.set(func(r *probeRuntime) { r.startErr = nil })
	time.Sleep(1500 * time.Millisecond) // a reconciler pass would redrive a queued turn
	if n := f.runtime.dispatches.Load(); n != 1 {
		t.Fatalf("dispatches = %d: the interrupted turn reached the agent", n)
	}
	if s2, _ := f.host.GetSession(ctx, ws, s.ID); s2.ActiveTurnID != "" {
		t.Fatalf("session still busy: %s", s2.ActiveTurnID)
	}
}}

// Seed 003 review: "If interrupt commits its queue fence and deliverStop()
// then rejects … a retry … only waits for a terminal result that may never
// arrive." The stop is durable and redelivered; the interrupt answers the
// terminal.
var QueueInterruptRedeliversFailedStop = Scenario{"queue/review_interrupt_redelivers_a_failed_stop", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	run := f.mustSend(s.ID, "run", "/sim hang")
	f.waitTurn(run, "accepted", host.Turn.Accepted)
	f.runtime.set(func(r *probeRuntime) { r.failCancels = 1 })
	res, err := f.host.InterruptTurn(ctx, host.InterruptInput{WorkspaceID: ws, SessionID: s.ID, TurnID: run.ID, Wait: 15 * time.Second})
	if err != nil || !res.Turn.Settled() || res.Turn.Outcome != host.OutcomeCanceled {
		t.Fatalf("interrupt with a lost stop: %+v %v", res, err)
	}
	if n := f.runtime.cancels.Load(); n < 2 {
		t.Fatalf("cancels = %d: the lost stop was never redelivered", n)
	}
	again, err := f.host.InterruptTurn(ctx, host.InterruptInput{WorkspaceID: ws, SessionID: s.ID, TurnID: run.ID})
	if err != nil || again.Turn.ID != run.ID || again.Turn.Outcome != res.Turn.Outcome {
		t.Fatalf("retried interrupt: %+v %v", again, err)
	}
}}

// Seed 003 review: "Recheck the interrupt receipt inside the gate … a
// retry … recomputes a different result." Concurrent interrupts of one
// turn answer one terminal.
var QueueConcurrentInterruptsOneTerminal = Scenario{"queue/review_concurrent_interrupts_answer_one_terminal", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	run := f.mustSend(s.ID, "run", "/sim hang")
	f.waitTurn(run, "accepted", host.Turn.Accepted)
	const n = 6
	res := make([]host.InterruptResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], errs[i] = f.host.InterruptTurn(ctx, host.InterruptInput{WorkspaceID: ws, SessionID: s.ID, TurnID: run.ID, By: fmt.Sprintf("u%d", i), Wait: 10 * time.Second})
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || res[i].Turn.ID != run.ID || res[i].Turn.Outcome != res[0].Turn.Outcome ||
			!res[i].Turn.SettledAt.Equal(*res[0].Turn.SettledAt) || res[i].Turn.CanceledBy != res[0].Turn.CanceledBy {
			t.Fatalf("interrupt %d: %+v %v (first %+v)", i, res[i], errs[i], res[0])
		}
	}
}}

// Seed 003 review: "An operation that already passed that check and is
// waiting for the Session gate can still mutate the queue." Every queue
// decision is made under the session lock in the store: a retract racing
// the terminal handoff either removes the entry (it never runs) or
// conflicts because it started (it runs once).
var QueueRetractRacesHandoff = Scenario{"queue/review_retract_racing_the_handoff_one_winner", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	for i := range 4 {
		run := f.mustSend(s.ID, fmt.Sprintf("hr-run-%d", i), "/sim hang")
		f.waitTurn(run, "accepted", host.Turn.Accepted)
		e := f.mustQueue(s.ID, fmt.Sprintf("hr-%d", i), fmt.Sprintf("/sim words=2 race %d", i), host.PlacementNextTurn, host.DispositionFollowup)
		var wg sync.WaitGroup
		var rerr error
		wg.Add(2)
		go func() { defer wg.Done(); f.cancel(run) }()
		go func() {
			defer wg.Done()
			_, rerr = f.host.RetractQueued(ctx, host.RetractInput{WorkspaceID: ws, SessionID: s.ID, EntryID: e.ID, By: "alice"})
		}()
		wg.Wait()
		got := f.entry(s.ID, e.ID)
		switch {
		case rerr == nil:
			if got.State != host.QueueRetracted || got.TurnID != "" {
				t.Fatalf("retract won but entry is %+v", got)
			}
		case host.CodeOf(rerr) == host.CodeOperationConflict:
			got = f.waitEntry(s.ID, e.ID, func(e host.QueueEntry) bool { return e.State == host.QueueDone })
			f.waitSettled(host.Turn{WorkspaceID: ws, SessionID: s.ID, ID: got.TurnID})
		default:
			t.Fatalf("retract %d: %v", i, rerr)
		}
	}
	ran := 0
	for _, tr := range f.turns(s.ID) {
		for _, u := range f.userTexts(s.ID, tr.ID) {
			if strings.Contains(u, " race ") {
				ran++
			}
		}
	}
	q, _ := f.host.Queue(ctx, ws, s.ID)
	if len(q.Entries) != 0 {
		t.Fatalf("entries left waiting: %+v", q.Entries)
	}
	t.Logf("%d of 4 raced entries ran", ran)
}}

// Internal ids (the queue's own successor claims, the decline follow-up)
// live in a reserved space no client id can reach, on the queue path too.
var QueueReservedIDsRefused = Scenario{"queue/reserved_ids_refused_on_every_placement", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	run := f.mustSend(s.ID, "run", "/sim hang")
	for _, id := range []string{host.QueueSubmitPrefix + "turn-x", host.DenyFollowUpPrefix + "op-1"} {
		for _, p := range []host.Placement{host.PlacementNextTurn, host.PlacementCurrentTurn} {
			_, err := f.submit(host.SendInput{SessionID: s.ID, ClientSubmitID: id, Content: host.MessageContent{Text: "squat"}, Placement: p})
			wantCode(t, err, host.CodeInvalidInput)
		}
	}
	if q, _ := f.host.Queue(ctx, ws, s.ID); q.Revision != 0 {
		t.Fatalf("a reserved id touched the queue: %+v", q)
	}
	f.cancel(run)
}}

// waitAgentContains polls until the session's agent text contains part.
func (f *fixture) waitAgentContains(sessionID, part string) {
	f.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		text := agentText(f.messages(sessionID, host.MessageQuery{Limit: 1000}))
		if strings.Contains(text, part) {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("agent text never contained %q (last %q)", part, text)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// continueFresh answers the context loss a crash causes with the
// conformance sim (it keeps no sessions across processes): the member's
// explicit choice, after which the waiting successor is sent.
func (f *fixture) continueFresh(sessionID string) {
	f.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		s, err := f.host.GetSession(ctx, ws, sessionID)
		if err == nil && s.ContextLost {
			break
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("session never reported its lost context: %+v %v", s, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := f.host.ContinueFresh(ctx, host.ContinueFreshInput{WorkspaceID: ws, SessionID: sessionID}); err != nil {
		f.t.Fatalf("continue fresh: %v", err)
	}
}

// A pull whose commit acknowledgement is lost is resolved from the
// entries themselves: durably pulled, so delivered, exactly once (seed
// 003: an accepted effect is handed over only with its proof).
var QueueLostPullAckDeliversOnce = Scenario{"queue/lost_pull_ack_delivers_from_the_durable_proof", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	f.runtime.set(func(r *probeRuntime) { r.muteSteering = true })
	run := f.mustSend(s.ID, "run", "/sim hang")
	f.waitTurn(run, "accepted", host.Turn.Accepted)
	f.waitAgentContains(s.ID, "Now hanging")
	e := f.mustQueue(s.ID, "lp", "lost ack steer", host.PlacementCurrentTurn, host.DispositionSteering)
	f.store.onCommitted(firstOnly())
	if err := f.runtime.notifySteering(ctx, host.TurnRef{WorkspaceID: ws, SessionID: s.ID, TurnID: run.ID}); err != nil {
		t.Fatal(err)
	}
	f.waitAgentContains(s.ID, `"lost ack steer" — taking it into account.]`)
	if got := f.entry(s.ID, e.ID); got.State != host.QueuePulled {
		t.Fatalf("entry after the lost ack: %+v", got)
	}
	f.cancel(run)
	if n := strings.Count(agentText(f.messages(s.ID, host.MessageQuery{Limit: 1000})), "lost ack steer"); n != 1 {
		t.Fatalf("delivered %d times", n)
	}
}}

// A queue admission whose commit acknowledgement is lost answers from the
// durable claim and entry, not with an error and not with a second entry.
var QueueLostAdmissionAckAnswersFromStore = Scenario{"queue/lost_admission_ack_answers_from_the_store", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	run := f.mustSend(s.ID, "run", "/sim hang")
	f.waitTurn(run, "accepted", host.Turn.Accepted)
	f.waitAgentContains(s.ID, "Now hanging")
	f.store.onCommitted(firstOnly())
	r, err := f.submit(host.SendInput{SessionID: s.ID, ClientSubmitID: "la", Content: host.MessageContent{Text: "after the lost ack"}, Placement: host.PlacementNextTurn})
	if err != nil || r.Entry == nil || r.Disposition != host.DispositionFollowup {
		t.Fatalf("admission with a lost ack: %+v %v", r, err)
	}
	q, _ := f.host.Queue(ctx, ws, s.ID)
	if len(q.Entries) != 1 || q.Entries[0].ID != r.Entry.ID || r.QueueRevision != q.Entries[0].AdmittedRevision {
		t.Fatalf("queue: %+v, answer %+v", q, r)
	}
	f.cancel(run)
}}

func (s *faultStore) GetQueueEntry(ctx context.Context, ws, sessionID, id string) (host.QueueEntry, error) {
	if s.failQueueReads.Load() {
		return host.QueueEntry{}, fmt.Errorf("conformance: store unreachable: %w", host.ErrUnavailable)
	}
	return s.Store.GetQueueEntry(ctx, ws, sessionID, id)
}

// Seed 003: "If an accepted effect cannot be given its required proof …
// fail-stop … rather than continuing with an ambiguous writer." A pull
// whose commit cannot be confirmed either way hands nothing to the agent,
// and the Host gives the session up: the turn ends, the entry is unknown
// (never delivered, never run again), and the session goes on.
var QueueUnprovablePullFailStops = Scenario{"queue/unprovable_pull_fail_stops_the_session", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	f.runtime.set(func(r *probeRuntime) { r.muteSteering = true })
	run := f.mustSend(s.ID, "run", "/sim hang")
	f.waitTurn(run, "accepted", host.Turn.Accepted)
	f.waitAgentContains(s.ID, "Now hanging")
	e := f.mustQueue(s.ID, "fs", "unprovable steer", host.PlacementCurrentTurn, host.DispositionSteering)
	f.store.onQueueCommitted(firstOnly())
	f.store.failQueueReads.Store(true)
	if err := f.runtime.notifySteering(ctx, host.TurnRef{WorkspaceID: ws, SessionID: s.ID, TurnID: run.ID}); err != nil {
		t.Fatal(err)
	}
	f.waitSettled(run) // the released agent stops the turn
	f.store.failQueueReads.Store(false)
	got := f.waitEntry(s.ID, e.ID, func(e host.QueueEntry) bool { return e.State != host.QueuePulled })
	if got.State != host.QueueUnknown || got.TurnID != run.ID {
		t.Fatalf("entry after fail-stop: %+v", got)
	}
	if strings.Contains(agentText(f.messages(s.ID, host.MessageQuery{Limit: 1000})), "unprovable steer") {
		t.Fatal("an unproven pull was handed to the agent")
	}
	if next := f.waitSettled(f.mustSend(s.ID, "after", "/sim words=2")); next.Outcome != host.OutcomeCompleted {
		t.Fatalf("the session after fail-stop: %+v", next)
	}
}}

// Seed 003 review: "An external follow-up racing an internal resume can
// turn a normal Session-busy conflict into a Host-Epoch drain. This should
// remain a scoped typed conflict." Here the internal follow-up (after a
// declined approval) races a member's queued follow-up at the same turn
// end: the member's runs first (it was queued first), the internal one
// waits for the session and runs after it, and nothing else is affected.
var QueueInternalFollowUpRacingQueueStaysScoped = Scenario{"queue/review_internal_follow_up_racing_the_queue_stays_scoped", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	tr := f.mustSend(s.ID, "perm", "/sim permission")
	_, it := f.pendingPermission(s.ID)
	queued := f.mustQueue(s.ID, "member-follow", "/sim words=30 member follow-up", host.PlacementNextTurn, host.DispositionFollowup)
	if r, err := f.respond(it, "reject", "bob", `{"message":"do it differently"}`); err != nil || r.Disposition != host.DispositionAnswered {
		t.Fatalf("respond: %+v %v", r, err)
	}
	f.waitSettled(tr)
	e := f.waitEntry(s.ID, queued.ID, func(e host.QueueEntry) bool { return e.State == host.QueueDone })
	id := host.DenyFollowUpPrefix + host.OperationIDFor(it.Ref())
	internal := f.waitSettled(f.waitFollowUp(s.ID, id))
	if internal.Outcome != host.OutcomeCompleted {
		t.Fatalf("the internal follow-up: %+v", internal)
	}
	member, err := f.host.GetTurn(ctx, ws, s.ID, e.TurnID)
	if err != nil || member.Outcome != host.OutcomeCompleted || member.Seq >= internal.Seq {
		t.Fatalf("member follow-up %+v (internal seq %d) %v", member, internal.Seq, err)
	}
	if ts := f.turnsWithSubmitID(s.ID, id); len(ts) != 1 {
		t.Fatalf("internal follow-up turns: %d", len(ts))
	}
	// The session takes new work as usual.
	if next := f.waitSettled(f.mustSend(s.ID, "after", "/sim words=2")); next.Outcome != host.OutcomeCompleted {
		t.Fatalf("after: %+v", next)
	}
}}
