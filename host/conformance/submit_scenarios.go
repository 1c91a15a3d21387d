package conformance

import (
	"sync"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

var SubmitIdempotent = Scenario{"submit/same_id_same_turn_one_dispatch", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	first := f.mustSend(s.ID, "s-1", "/sim words=5")
	for i := 0; i < 5; i++ {
		r, err := f.send(s.ID, "s-1", "/sim words=5")
		if err != nil || r.Turn == nil || r.Turn.ID != first.ID || !r.Replayed {
			t.Fatalf("retry %d: %+v %v", i, r, err)
		}
	}
	f.waitSettled(first)
	if r, err := f.send(s.ID, "s-1", "/sim words=5"); err != nil || r.Turn.ID != first.ID {
		t.Fatalf("retry after settlement: %+v %v", r, err)
	}
	if n := f.runtime.dispatches.Load(); n != 1 {
		t.Fatalf("dispatches = %d, want 1", n)
	}
	turns, _ := f.host.ListSessionTurns(ctx, ws, s.ID, host.TurnQuery{})
	if len(turns.Turns) != 1 {
		t.Fatalf("turns = %d, want 1", len(turns.Turns))
	}
}}

var SubmitIdempotentConcurrent = Scenario{"submit/concurrent_same_id_one_dispatch", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	const n = 20
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r, err := f.send(s.ID, "same", "/sim words=3")
			if err != nil {
				t.Errorf("submit %d: %v", i, err)
				return
			}
			ids[i] = r.Turn.ID
		}(i)
	}
	wg.Wait()
	for i := range ids {
		if ids[i] != ids[0] {
			t.Fatalf("submit %d got turn %s, submit 0 got %s", i, ids[i], ids[0])
		}
	}
	if got := f.runtime.dispatches.Load(); got != 1 {
		t.Fatalf("dispatches = %d, want 1", got)
	}
}}

var SubmitConflict = Scenario{"submit/same_id_different_content_conflicts", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	f.waitSettled(f.mustSend(s.ID, "s-2", "first"))
	_, err := f.send(s.ID, "s-2", "second")
	wantCode(t, err, host.CodeOperationConflict)
	other := f.createEmpty()
	_, err = f.send(other.ID, "s-2", "first")
	wantCode(t, err, host.CodeOperationConflict)
	if n := f.runtime.dispatches.Load(); n != 1 {
		t.Fatalf("dispatches = %d, want 1", n)
	}
}}

// A retry is answered from its claim even when the admission would now
// refuse the request (here: the session was deleted since), with no new
// Turn and no second prompt to the agent.
var SubmitRetryAfterRefusal = Scenario{"submit/retry_after_session_deleted_answers_from_claim", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	first := f.waitSettled(f.mustSend(s.ID, "r-1", "/sim words=3"))
	f.del("u1", s.ID)
	r, err := f.send(s.ID, "r-1", "/sim words=3")
	if err != nil || r.Turn == nil || r.Turn.ID != first.ID || !r.Replayed {
		t.Fatalf("retry after the delete: %+v %v, want turn %s replayed", r, err, first.ID)
	}
	_, err = f.send(s.ID, "r-2", "/sim words=3")
	wantCode(t, err, host.CodeNotFound)
	if n := f.runtime.dispatches.Load(); n != 1 {
		t.Fatalf("dispatches = %d, want 1", n)
	}
}}

var ClaimTimeIsOccurrence = Scenario{"submit/claim_time_is_message_occurrence", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	var claimed time.Time
	f.runtime.set(func(r *probeRuntime) {
		r.beforeDispatch = func(req host.DispatchRequest) error {
			claimed = req.OccurredAt
			f.clock.Advance(time.Hour) // acceptance happens "much later"
			return nil
		}
	})
	tr := f.waitSettled(f.mustSend(s.ID, "s-3", "hello"))
	ms := f.messages(s.ID, host.MessageQuery{TurnID: tr.ID})
	if len(ms) == 0 || ms[0].Role != host.RoleUser {
		t.Fatalf("no user message: %+v", ms)
	}
	if !ms[0].CreatedAt.Equal(claimed) || !tr.CreatedAt.Equal(claimed) {
		t.Fatalf("message at %v, turn at %v, claim at %v: all must be the claim's time", ms[0].CreatedAt, tr.CreatedAt, claimed)
	}
}}

var SessionBusy = Scenario{"submit/session_busy_while_turn_active", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	active := f.mustSend(s.ID, "s-4", "/sim hang")
	_, err := f.send(s.ID, "s-5", "are you there?")
	wantCode(t, err, host.CodeSessionBusy)
	if !host.CodeSessionBusy.Retryable() {
		t.Fatal("session_busy is retryable")
	}
	_, err = f.host.SendInput(ctx, host.SendInput{WorkspaceID: ws, SessionID: s.ID, ClientSubmitID: "s-6",
		Content: host.MessageContent{Text: "steer"}, Placement: host.PlacementCurrentTurn, TurnID: "turn_other"})
	wantCode(t, err, host.CodeNotDispatched)
	if _, err := f.host.CancelTurn(ctx, host.CancelInput{WorkspaceID: ws, SessionID: s.ID, TurnID: active.ID, Wait: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	f.waitSettled(f.mustSend(s.ID, "s-5", "are you there?"))
	if n := f.runtime.dispatches.Load(); n != 2 {
		t.Fatalf("dispatches = %d, want 2 (busy and mismatched submits never dispatch)", n)
	}
}}

var InvalidInput = Scenario{"submit/invalid_input_changes_nothing", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	_, err := f.send(s.ID, "", "hello")
	wantCode(t, err, host.CodeInvalidInput)
	_, err = f.send(s.ID, "s-7", "   ")
	wantCode(t, err, host.CodeInvalidInput)
	_, err = f.send(s.ID, "s-8", string([]byte{0xff, 0xfe}))
	wantCode(t, err, host.CodeInvalidInput)
	_, err = f.send("ses_missing", "s-9", "hello")
	wantCode(t, err, host.CodeNotFound)
	if turns, _ := f.host.ListSessionTurns(ctx, ws, s.ID, host.TurnQuery{}); len(turns.Turns) != 0 || f.runtime.dispatches.Load() != 0 {
		t.Fatalf("bad input must change nothing: %d turns, %d dispatches", len(turns.Turns), f.runtime.dispatches.Load())
	}
}}

// A submit to a session whose agent session is live on this replica is
// admitted and dispatched in one commit: its Turn is born dispatched,
// with no queued → dispatched update. A cold session's Turn goes through
// Start and that update, and so does a warm Turn the runtime refuses
// locally (it goes back to queued first).
var SubmitWarmOneCommit = Scenario{"submit/warm_session_admits_and_dispatches_in_one_commit", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	var mu sync.Mutex
	guards := map[string]int{} // Turn id → updates to dispatched
	f.store.onTurnWrite(func(t host.Turn) error {
		if t.Phase == host.PhaseDispatched {
			mu.Lock()
			guards[t.ID]++
			mu.Unlock()
		}
		return nil
	})
	count := func(id string) int {
		mu.Lock()
		defer mu.Unlock()
		return guards[id]
	}

	cold := f.waitSettled(f.mustSend(s.ID, "w-1", "/sim words=3"))
	warm := f.waitSettled(f.mustSend(s.ID, "w-2", "/sim words=3"))
	for _, tr := range []host.Turn{cold, warm} {
		f.expectTurn(s.ID, tr.ID, host.PhaseSettled, host.OutcomeCompleted, "")
	}
	if n := count(cold.ID); n != 1 {
		t.Fatalf("the first Turn was marked dispatched %d times, want 1 (Start, then the guard commit)", n)
	}
	if n := count(warm.ID); n != 0 {
		t.Fatalf("the warm Turn was marked dispatched in %d later commits, want 0 (born dispatched)", n)
	}

	refused := f.sendRefusedLocally(s.ID, "w-3")
	done := f.waitSettled(refused)
	f.expectTurn(s.ID, done.ID, host.PhaseSettled, host.OutcomeCompleted, "")
	if n := count(refused.ID); n != 1 {
		t.Fatalf("a warm Turn refused locally was marked dispatched %d times after going back to queued, want 1", n)
	}
	if n := f.runtime.dispatches.Load(); n != 3 {
		t.Fatalf("the agent received %d prompts, want 3", n)
	}
}}
