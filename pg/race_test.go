package pg

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ensemble-dev/ensemble/host"
)

// probe wraps the runtime every Host of a test shares, counting provider
// dispatches: the number that must stay at one per ClientSubmitID however
// many replicas race.
type probe struct {
	host.Runtime
	dispatches atomic.Int64
	deliveries atomic.Int64
}

// RespondInteraction counts answers delivered to the provider.
func (p *probe) RespondInteraction(ctx context.Context, d host.InteractionDelivery) (host.DeliveryReport, error) {
	p.deliveries.Add(1)
	return p.Runtime.RespondInteraction(ctx, d)
}

func (p *probe) Dispatch(ctx context.Context, req host.DispatchRequest, sink host.TurnSink) error {
	p.dispatches.Add(1)
	return p.Runtime.Dispatch(ctx, req, sink)
}

// replicas builds n Hosts over one store (one connection each from its
// pool, so every Host's transactions race in the database) and one shared
// sim runtime. Each Host has its own in-process session locks, as separate
// replicas do, so nothing but PostgreSQL orders their commands.
func replicas(t *testing.T, n int) ([]*host.Host, *Store, *probe) {
	t.Helper()
	url, _ := testSchema(t)
	st := openTest(t, withParams(url, map[string]string{"pool_max_conns": fmt.Sprint(n + 4)}), Options{})
	warm(t, st, n)
	rt := &probe{Runtime: newSimRuntime(t, -1)}
	hosts := make([]*host.Host, n)
	for i := range hosts {
		hosts[i] = host.New(host.Config{Store: st, Runtime: rt, Logger: quietLogger()})
	}
	if _, err := hosts[0].Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	return hosts, st, rt
}

// warm opens n pooled connections up front, so racing commands meet in
// the database instead of being staggered by connection setup.
func warm(t *testing.T, st *Store, n int) {
	t.Helper()
	conns := make([]*pgxpool.Conn, 0, n)
	for range n {
		c, err := st.pool.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
}

// together runs fn once per Host, all released at the same moment.
func together(hosts []*host.Host, fn func(i int, h *host.Host)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, h := range hosts {
		wg.Go(func() {
			<-start
			fn(i, h)
		})
	}
	close(start)
	wg.Wait()
}

func count(t *testing.T, st *Store, query string, args ...any) int {
	t.Helper()
	var n int
	if err := st.pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func createSession(t *testing.T, h *host.Host, ws string) string {
	t.Helper()
	r, err := h.CreateSession(context.Background(), host.CreateSessionInput{WorkspaceID: ws, CreatedBy: "race"})
	if err != nil {
		t.Fatal(err)
	}
	return r.Session.ID
}

// 50 replicas submit the same ClientSubmitID to one session at once: one
// Turn, one provider dispatch, and every caller gets that Turn.
func TestRaceSameClientSubmitIDOneTurnOneDispatch(t *testing.T) {
	const n = 50
	hosts, st, rt := replicas(t, n)
	ws := "ws-race"
	sid := createSession(t, hosts[0], ws)

	results := make([]host.SendResult, n)
	errs := make([]error, n)
	together(hosts, func(i int, h *host.Host) {
		results[i], errs[i] = h.SendInput(context.Background(), host.SendInput{WorkspaceID: ws, SessionID: sid,
			ClientSubmitID: "same-id", Content: host.MessageContent{Text: "/sim instant\nhello"}, SubmittedBy: "race"})
	})
	fresh := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("submit %d: %v", i, errs[i])
		}
		if results[i].Turn == nil || results[i].Turn.ID != results[0].Turn.ID {
			t.Fatalf("submit %d returned turn %+v, submit 0 returned %s", i, results[i].Turn, results[0].Turn.ID)
		}
		if !results[i].Replayed {
			fresh++
		}
	}
	if fresh != 1 {
		t.Fatalf("%d submits report a fresh admission, want exactly 1 (the rest replay)", fresh)
	}
	if d := rt.dispatches.Load(); d != 1 {
		t.Fatalf("provider dispatches = %d, want 1", d)
	}
	if c := count(t, st, `SELECT count(*) FROM turns WHERE workspace_id = $1 AND session_id = $2`, ws, sid); c != 1 {
		t.Fatalf("turns = %d, want 1", c)
	}
	if c := count(t, st, `SELECT count(*) FROM submit_claims WHERE workspace_id = $1`, ws); c != 1 {
		t.Fatalf("claims = %d, want 1", c)
	}
	if c := count(t, st, `SELECT count(*) FROM messages WHERE workspace_id = $1 AND role = 'user'`, ws); c != 1 {
		t.Fatalf("user messages = %d, want 1", c)
	}
}

// The same ClientSubmitID sent to two different sessions at once is not
// ordered by any session lock: the claim's primary key decides. One Turn
// exists afterwards; callers on the winner's session replay it, callers on
// the other session get operation_conflict, and nothing else is dispatched.
func TestRaceClientSubmitIDAcrossSessionsDecidedByPrimaryKey(t *testing.T) {
	const n = 40
	hosts, st, rt := replicas(t, n)
	ws := "ws-race-pk"
	sids := []string{createSession(t, hosts[0], ws), createSession(t, hosts[0], ws)}

	results := make([]host.SendResult, n)
	errs := make([]error, n)
	together(hosts, func(i int, h *host.Host) {
		results[i], errs[i] = h.SendInput(context.Background(), host.SendInput{WorkspaceID: ws, SessionID: sids[i%2],
			ClientSubmitID: "contested", Content: host.MessageContent{Text: "/sim instant\nhello"}, SubmittedBy: "race"})
	})
	var winner string
	for i := range n {
		if errs[i] == nil {
			if winner == "" {
				winner = results[i].Turn.SessionID
			}
			if results[i].Turn.SessionID != winner {
				t.Fatalf("both sessions got a turn for one ClientSubmitID")
			}
		}
	}
	if winner == "" {
		t.Fatal("no submit succeeded")
	}
	for i := range n {
		switch {
		case sids[i%2] == winner && errs[i] != nil:
			t.Fatalf("submit %d on the winning session: %v", i, errs[i])
		case sids[i%2] != winner && host.CodeOf(errs[i]) != host.CodeOperationConflict:
			t.Fatalf("submit %d on the other session: %v; want operation_conflict", i, errs[i])
		}
	}
	if d := rt.dispatches.Load(); d != 1 {
		t.Fatalf("provider dispatches = %d, want 1", d)
	}
	if c := count(t, st, `SELECT count(*) FROM turns WHERE workspace_id = $1`, ws); c != 1 {
		t.Fatalf("turns = %d, want 1", c)
	}
	if c := count(t, st, `SELECT count(*) FROM messages WHERE workspace_id = $1 AND role = 'user'`, ws); c != 1 {
		t.Fatalf("user messages = %d, want 1", c)
	}
}

// 20 replicas submit different prompts to one idle session at once. The
// session's active turn is a compare-and-swap decided under the session's
// row lock: exactly one submit starts a turn, the other 19 are told the
// session is busy, and only the winner is dispatched.
func TestRaceActiveTurnOneWinner(t *testing.T) {
	const n = 20
	hosts, st, rt := replicas(t, n)
	ws := "ws-race-cas"
	sid := createSession(t, hosts[0], ws)

	results := make([]host.SendResult, n)
	errs := make([]error, n)
	together(hosts, func(i int, h *host.Host) {
		// The winner's turn hangs, so the session stays busy for the others.
		results[i], errs[i] = h.SendInput(context.Background(), host.SendInput{WorkspaceID: ws, SessionID: sid,
			ClientSubmitID: fmt.Sprintf("cas-%d", i), Content: host.MessageContent{Text: fmt.Sprintf("/sim hang\nprompt %d", i)}, SubmittedBy: "race"})
	})
	var started []int
	for i := range n {
		switch {
		case errs[i] == nil && results[i].Disposition == host.DispositionTurnStarted:
			started = append(started, i)
		case host.CodeOf(errs[i]) == host.CodeSessionBusy:
		default:
			t.Fatalf("submit %d: %+v %v; want turn_started or session_busy", i, results[i], errs[i])
		}
	}
	if len(started) != 1 {
		t.Fatalf("%d submits started a turn, want exactly 1", len(started))
	}
	if d := rt.dispatches.Load(); d != 1 {
		t.Fatalf("provider dispatches = %d, want 1", d)
	}
	if c := count(t, st, `SELECT count(*) FROM turns WHERE workspace_id = $1`, ws); c != 1 {
		t.Fatalf("turns = %d, want 1", c)
	}
	if c := count(t, st, `SELECT count(*) FROM submit_claims WHERE workspace_id = $1`, ws); c != 1 {
		t.Fatalf("claims = %d, want 1 (busy submits claim nothing)", c)
	}
	win := results[started[0]].Turn
	s, err := hosts[0].GetSession(context.Background(), ws, sid)
	if err != nil || s.ActiveTurnID != win.ID || s.TurnCount != 1 {
		t.Fatalf("session after the race: %+v %v; want active turn %s and turn count 1", s, err, win.ID)
	}
	// The replica that dispatched the turn is the one whose cancel wait is
	// woken by the settlement.
	if _, err := hosts[started[0]].CancelTurn(context.Background(), host.CancelInput{WorkspaceID: ws, SessionID: sid,
		TurnID: win.ID, Wait: 10 * time.Second}); err != nil {
		t.Fatalf("cancel the hanging turn: %v", err)
	}
}

// 20 replicas answer one pending interaction at once, each differently.
// The interaction's state is a compare-and-set decided by the row: exactly
// one answer wins, the 19 others are told they were superseded, one
// runtime operation exists, and with every replica's delivery worker
// running the answer reaches the agent once.
func TestRaceInteractionAnswersOneWinner(t *testing.T) {
	const n = 20
	hosts, st, rt := replicas(t, n)
	ws := "ws-race-answer"
	sid := createSession(t, hosts[0], ws)
	r, err := hosts[0].SendInput(context.Background(), host.SendInput{WorkspaceID: ws, SessionID: sid,
		ClientSubmitID: "ask", Content: host.MessageContent{Text: "/sim permission"}, SubmittedBy: "race"})
	if err != nil {
		t.Fatal(err)
	}
	var pending host.Interaction
	for deadline := time.Now().Add(15 * time.Second); pending.RequestID == ""; time.Sleep(5 * time.Millisecond) {
		tree, err := hosts[0].GetSessionInteractionTreeSnapshot(context.Background(), ws, sid)
		if err == nil && len(tree.Pending()) == 1 {
			pending = tree.Pending()[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pending interaction: %+v %v", tree, err)
		}
	}

	workers, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, h := range hosts {
		wg.Go(func() { h.RunOperations(workers) })
	}
	defer func() { stop(); wg.Wait() }()

	results := make([]host.RespondResult, n)
	errs := make([]error, n)
	together(hosts, func(i int, h *host.Host) {
		results[i], errs[i] = h.RespondInteraction(context.Background(), host.RespondInput{Ref: pending.Ref(),
			Response:    host.InteractionResponse{OptionID: pending.Options[0].ID, Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))},
			RespondedBy: fmt.Sprintf("user-%d", i), RespondedByName: fmt.Sprintf("User %d", i)})
	})
	winner := -1
	for i := range n {
		switch {
		case errs[i] != nil:
			t.Fatalf("answer %d: %v", i, errs[i])
		case results[i].Disposition == host.DispositionAnswered:
			if winner >= 0 {
				t.Fatalf("answers %d and %d both won", winner, i)
			}
			winner = i
		case results[i].Disposition != host.DispositionSuperseded:
			t.Fatalf("answer %d: disposition %q", i, results[i].Disposition)
		}
	}
	if winner < 0 {
		t.Fatal("no answer won")
	}
	got, err := st.GetInteraction(context.Background(), pending.Ref())
	if err != nil || got.AnsweredBy != fmt.Sprintf("user-%d", winner) || got.Response == nil ||
		string(got.Response.Payload) != fmt.Sprintf(`{"n":%d}`, winner) {
		t.Fatalf("canonical interaction %+v %v; want answer %d", got, err, winner)
	}
	if c := count(t, st, `SELECT count(*) FROM runtime_operations WHERE workspace_id = $1`, ws); c != 1 {
		t.Fatalf("runtime operations = %d, want 1", c)
	}
	if tu := waitSettled(t, hosts[0], *r.Turn); tu.Outcome != host.OutcomeCompleted {
		t.Fatalf("the answered turn settled %+v", tu)
	}
	if d := rt.deliveries.Load(); d != 1 {
		t.Fatalf("answers delivered to the agent = %d, want 1", d)
	}
}
