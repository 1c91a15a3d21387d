package pg

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// killStore terminates the backend of one chosen transaction, from a
// separate admin connection, at a chosen point: the database connection is
// lost in the middle of a command, as in a failover or an operator's
// pg_terminate_backend.
type killStore struct {
	host.Store
	t *testing.T
	// atBegin, when set, kills the next transaction right after BEGIN.
	atBegin atomic.Bool
	// atPhase, when set, kills the transaction that moves a turn to it;
	// durably_accepted means the one that binds the provider identity,
	// which also settles the turn when the answer came with the barrier.
	atPhase atomic.Value // host.TurnPhase
	killed  atomic.Int64
}

func (k *killStore) Update(ctx context.Context, fn func(host.Tx) error) error {
	return k.Store.Update(ctx, func(tx host.Tx) error {
		if k.atBegin.CompareAndSwap(true, false) {
			k.kill(tx)
		}
		return fn(&killTx{Tx: tx, k: k})
	})
}

type killTx struct {
	host.Tx
	k *killStore
}

func (t *killTx) UpdateTurn(ctx context.Context, tu host.Turn) error {
	p, _ := t.k.atPhase.Load().(host.TurnPhase)
	hit := p != "" && (p == tu.Phase || p == host.PhaseDurablyAccepted && tu.ProviderTurnID != "")
	if hit && t.k.atPhase.CompareAndSwap(p, host.TurnPhase("")) {
		t.k.kill(t.Tx)
	}
	return t.Tx.UpdateTurn(ctx, tu)
}

// kill terminates the transaction's backend and waits until it is gone.
func (k *killStore) kill(htx host.Tx) {
	c := htx.(*tx).tx
	if c.conn == nil {
		// The connection is acquired at the first statement (BEGIN goes
		// with it): take it now so there is a backend to terminate.
		conn, err := c.t.store.pool.Acquire(context.Background())
		if err != nil {
			k.t.Fatalf("acquire: %v", err)
		}
		c.conn = conn
	}
	pid := c.conn.Conn().PgConn().PID()
	var ok bool
	if err := adminConn(k.t).QueryRow(context.Background(), `SELECT pg_terminate_backend($1, 5000)`, pid).Scan(&ok); err != nil || !ok {
		k.t.Errorf("terminate backend %d: %v %v", pid, ok, err)
	}
	k.killed.Add(1)
}

func lossFixture(t *testing.T) (*host.Host, *killStore, *Store) {
	t.Helper()
	url, _ := testSchema(t)
	st := openTest(t, url, Options{Logger: quietLogger()})
	ks := &killStore{Store: st, t: t}
	h := host.New(host.Config{Store: ks, Runtime: newSimRuntime(t, -1), Logger: quietLogger()})
	if _, err := h.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	return h, ks, st
}

func submit(h *host.Host, ws, sid, id, text string) (host.SendResult, error) {
	return h.SendInput(context.Background(), host.SendInput{WorkspaceID: ws, SessionID: sid, ClientSubmitID: id,
		Content: host.MessageContent{Text: text}, SubmittedBy: "loss"})
}

// waitSettled polls until the turn settles; the store must have recovered
// by itself for that to happen.
func waitSettled(t *testing.T, h *host.Host, tu host.Turn) host.Turn {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := h.GetTurn(context.Background(), tu.WorkspaceID, tu.SessionID, tu.ID)
		if err == nil && got.Settled() {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("turn %s never settled: %+v %v", tu.ID, got, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The connection dies inside the admission transaction: the submit fails
// with the retryable unavailable code, nothing of it is stored, and the
// same request retried on the same Host (nothing restarted) succeeds.
func TestConnectionLossDuringAdmissionIsUnavailableAndWritesNothing(t *testing.T) {
	t.Parallel() // waits on WAL flushes mostly; overlaps with the other parallel tests
	h, ks, st := lossFixture(t)
	ws := "ws-loss"
	sid := createSession(t, h, ws)

	ks.atBegin.Store(true)
	_, err := submit(h, ws, sid, "lost-1", "hello")
	if host.CodeOf(err) != host.CodeUnavailable || !host.CodeOf(err).Retryable() {
		t.Fatalf("submit while its connection dies: %v (%s); want retryable unavailable", err, host.CodeOf(err))
	}
	if ks.killed.Load() != 1 {
		t.Fatal("no backend was terminated")
	}
	if c := count(t, st, `SELECT count(*) FROM submit_claims WHERE workspace_id = $1`, ws); c != 0 {
		t.Fatalf("%d claims survive a failed admission", c)
	}
	if c := count(t, st, `SELECT count(*) FROM turns WHERE workspace_id = $1`, ws); c != 0 {
		t.Fatalf("%d turns survive a failed admission", c)
	}
	if c := count(t, st, `SELECT count(*) FROM messages WHERE workspace_id = $1`, ws); c != 0 {
		t.Fatalf("%d messages survive a failed admission", c)
	}
	if s, err := h.GetSession(context.Background(), ws, sid); err != nil || s.ActiveTurnID != "" || s.TurnCount != 0 {
		t.Fatalf("session after a failed admission: %+v %v", s, err)
	}

	r, err := submit(h, ws, sid, "lost-1", "hello")
	if err != nil || r.Replayed || r.Turn == nil {
		t.Fatalf("the retried submit: %+v %v; want a fresh turn", r, err)
	}
	if tu := waitSettled(t, h, *r.Turn); tu.Outcome != host.OutcomeCompleted {
		t.Fatalf("retried turn settled %+v", tu)
	}
}

// The connection dies while the acceptance barrier is being committed: the
// provider may have the prompt, so the caller gets outcome_unknown (never a
// guess), the turn is settled failed/execution_status_unknown on a fresh
// connection without binding an identity or keeping output, the claim stays
// prepared, and the session takes the next prompt.
func TestConnectionLossAtAcceptanceIsOutcomeUnknown(t *testing.T) {
	t.Parallel() // waits on WAL flushes mostly; overlaps with the other parallel tests
	h, ks, st := lossFixture(t)
	ws := "ws-loss-accept"
	sid := createSession(t, h, ws)

	ks.atPhase.Store(host.PhaseDurablyAccepted)
	_, err := submit(h, ws, sid, "lost-2", "hello")
	if host.CodeOf(err) != host.CodeOutcomeUnknown {
		t.Fatalf("submit whose acceptance commit lost its connection: %v; want outcome_unknown", err)
	}
	page, err := h.ListSessionTurns(context.Background(), ws, sid, host.TurnQuery{})
	if err != nil || len(page.Turns) != 1 {
		t.Fatalf("turns: %+v %v", page, err)
	}
	tu := waitSettled(t, h, page.Turns[0])
	if tu.Outcome != host.OutcomeFailed || tu.FailureReason != host.ReasonExecutionStatusUnknown || tu.ProviderTurnID != "" {
		t.Fatalf("turn after a lost acceptance: %+v; want failed/execution_status_unknown without an identity", tu)
	}
	if c, err := st.GetClaim(context.Background(), ws, "lost-2"); err != nil || c.State != host.ClaimPrepared {
		t.Fatalf("claim: %+v %v; want it still prepared", c, err)
	}
	if n := count(t, st, `SELECT count(*) FROM messages WHERE workspace_id = $1 AND role = 'agent'`, ws); n != 0 {
		t.Fatalf("%d agent messages became canonical without acceptance", n)
	}
	r, err := submit(h, ws, sid, "after-loss", "hello again")
	if err != nil {
		t.Fatalf("next submit: %v", err)
	}
	waitSettled(t, h, *r.Turn)
}

// Every backend of the store is terminated several times while clients
// submit: commands fail only with retryable codes, clients that retry the
// same request get exactly one turn for it, the store and Host recover by
// themselves, and the canonical records are consistent afterwards.
func TestBackendsTerminatedWhileRequestsAreInFlight(t *testing.T) {
	t.Parallel() // waits on WAL flushes mostly; overlaps with the other parallel tests
	url, schema := testSchema(t)
	st := openTest(t, withParams(url, map[string]string{"pool_max_conns": "12"}), Options{Logger: quietLogger()})
	h := host.New(host.Config{Store: st, Runtime: newSimRuntime(t, -1), Logger: quietLogger()})
	if _, err := h.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	ws := "ws-chaos"
	const clients, rounds = 6, 10
	sids := make([]string, clients)
	for i := range sids {
		sids[i] = createSession(t, h, ws)
	}

	var (
		mu       sync.Mutex
		codes    = map[host.Code]int{}
		progress atomic.Int64
	)
	// waitIdle waits for the session to take a new prompt; a session left
	// busy for good would mean a half-finished command.
	waitIdle := func(sid string) error {
		deadline := time.Now().Add(20 * time.Second)
		for {
			s, err := h.GetSession(context.Background(), ws, sid)
			if err == nil && s.ActiveTurnID == "" {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("session %s stays busy: %+v %v", sid, s, err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for c := range clients {
		wg.Go(func() {
			for r := range rounds {
				id := fmt.Sprintf("c%d-r%d", c, r)
				for attempt := 0; ; attempt++ {
					// A retry of the same id goes at once: an unavailable
					// submit may have left its turn queued (busy) for it.
					if attempt == 0 {
						if err := waitIdle(sids[c]); err != nil {
							errs <- err
							return
						}
					}
					_, err := submit(h, ws, sids[c], id, "hello")
					progress.Add(1)
					if err == nil {
						break
					}
					code := host.CodeOf(err)
					mu.Lock()
					codes[code]++
					mu.Unlock()
					switch {
					case code == host.CodeOutcomeUnknown:
						// The request is answered: the turn failed without a guess.
					case code == host.CodeUnavailable && attempt < 20:
						continue // a client retries the same request
					default:
						errs <- fmt.Errorf("submit %s: %v (%s)", id, err, code)
						return
					}
					break
				}
			}
		})
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	// Terminate every backend of this store four times while clients run,
	// spread over the run by the number of submits made so far.
	killed := 0
kills:
	for i := range 4 {
		for progress.Load() < int64((i+1)*clients*rounds/6) {
			select {
			case <-finished:
				break kills
			case <-time.After(time.Millisecond):
			}
		}
		killed += terminate(t, schema)
	}
	<-finished
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if killed == 0 {
		t.Fatal("no backend was ever terminated")
	}
	t.Logf("terminated %d backends; failures by code: %v", killed, codes)

	// Recovered by itself: every session takes one more prompt.
	for c, sid := range sids {
		if err := waitIdle(sid); err != nil {
			t.Fatal(err)
		}
		r, err := submit(h, ws, sid, fmt.Sprintf("c%d-after", c), "hello")
		if err != nil {
			t.Fatalf("submit after the losses: %v", err)
		}
		waitSettled(t, h, *r.Turn)
	}
	checkConsistent(t, st, ws)
}

// checkConsistent asserts that no command left a half-written record.
func checkConsistent(t *testing.T, st *Store, ws string) {
	t.Helper()
	for _, c := range []struct{ what, query string }{
		{"claims whose turn is missing", `SELECT count(*) FROM submit_claims c WHERE c.workspace_id = $1 AND c.turn_id <> ''
			AND NOT EXISTS (SELECT 1 FROM turns t WHERE t.workspace_id = c.workspace_id AND t.session_id = c.session_id AND t.id = c.turn_id)`},
		{"turns without their claim", `SELECT count(*) FROM turns t WHERE t.workspace_id = $1
			AND NOT EXISTS (SELECT 1 FROM submit_claims c WHERE c.workspace_id = t.workspace_id AND c.client_submit_id = t.client_submit_id AND c.turn_id = t.id)`},
		{"turns without their prompt", `SELECT count(*) FROM turns t WHERE t.workspace_id = $1
			AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.workspace_id = t.workspace_id AND m.session_id = t.session_id AND m.id = t.id || '.prompt')`},
		{"sessions whose turn count disagrees with their turns", `SELECT count(*) FROM sessions s WHERE s.workspace_id = $1
			AND s.turn_count <> (SELECT count(*) FROM turns t WHERE t.workspace_id = s.workspace_id AND t.session_id = s.id)`},
		{"sessions behind their messages' versions", `SELECT count(*) FROM sessions s WHERE s.workspace_id = $1
			AND s.message_version < (SELECT coalesce(max(version), 0) FROM messages m WHERE m.workspace_id = s.workspace_id AND m.session_id = s.id)`},
		{"unsettled turns", `SELECT count(*) FROM turns WHERE workspace_id = $1 AND phase <> 'settled'`},
		{"busy sessions", `SELECT count(*) FROM sessions WHERE workspace_id = $1 AND active_turn_id <> ''`},
		{"accepted claims without a bound turn", `SELECT count(*) FROM submit_claims c JOIN turns t
			ON t.workspace_id = c.workspace_id AND t.session_id = c.session_id AND t.id = c.turn_id
			WHERE c.workspace_id = $1 AND c.state = 'accepted' AND t.provider_turn_id = ''`},
		{"agent output of turns never accepted", `SELECT count(*) FROM messages m JOIN turns t
			ON t.workspace_id = m.workspace_id AND t.session_id = m.session_id AND t.id = m.turn_id
			WHERE m.workspace_id = $1 AND m.role = 'agent' AND t.provider_turn_id = ''`},
	} {
		if n := count(t, st, c.query, ws); n != 0 {
			t.Errorf("%d %s", n, c.what)
		}
	}
	if n := count(t, st, `SELECT count(*) FROM turns WHERE workspace_id = $1`, ws); n == 0 {
		t.Error("no turns at all")
	}
}
