package main

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// killTestTurn is the part of a turn the kill test checks.
type killTestTurn struct {
	ID             string `json:"id"`
	Phase          string `json:"phase"`
	Outcome        string `json:"outcome"`
	FailureReason  string `json:"failureReason"`
	ClientSubmitID string `json:"clientSubmitId"`
}

// envInt reads a positive integer from the environment, or def.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// The real binary on PostgreSQL with the sim agent as its own process is
// SIGKILLed at random moments while several clients submit with unique
// ids; each client resubmits an unanswered id unchanged until it gets an
// answer, across restarts. Afterwards every id has exactly one turn, every
// acknowledged submission is there, every turn is settled (completed or
// explicitly unknown), no message still streams, and a watcher's stream
// was gap-free or explicitly resynced. ENSEMBLE_KILLTEST_ROUNDS and
// ENSEMBLE_KILLTEST_CLIENTS make it longer (CI runs the small default).
func TestRandomKillsKeepEverySubmission(t *testing.T) {
	if testing.Short() {
		t.Skip("kill test: not in -short")
	}
	rounds := envInt("ENSEMBLE_KILLTEST_ROUNDS", 4)
	clients := envInt("ENSEMBLE_KILLTEST_CLIENTS", 3)
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("ENSEMBLE_KILLTEST_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("seed %d (ENSEMBLE_KILLTEST_SEED), %d kills, %d clients", seed, rounds, clients)
	rng := rand.New(rand.NewPCG(seed, seed>>1))

	bin := ensembleBinary(t)
	c := &cluster{t: t, dataDir: t.TempDir(), ws: strings.ToLower(host.RandomID("ws"))}
	c.args = []string{"--database-url", clusterPostgres(t), "--workspace", c.ws,
		// The agent is its own process, so a kill of the server is not a
		// kill of the agent.
		"--agent", bin + " sim-agent --rate 2ms",
		"--http-request-rate", "-1", "--ws-request-rate", "-1", "--max-conns-per-user", "-1"}
	var cur atomic.Pointer[serverProc]
	cur.Store(c.start())

	sids := make([]string, clients)
	for i := range sids {
		sids[i] = c.createSession(cur.Load())
	}
	w := c.watch(cur.Load(), sids[0])

	var (
		mu       sync.Mutex
		acked    = map[string]string{} // id -> turn id of the acknowledgement
		ids      []string
		failures []string
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for ci := range clients {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("kill-%d-%d", ci, n)
				mu.Lock()
				ids = append(ids, id)
				mu.Unlock()
				turnID, err := killTestSubmit(c, &cur, sids[ci], id)
				mu.Lock()
				if err != nil {
					failures = append(failures, err.Error())
				} else {
					acked[id] = turnID
				}
				mu.Unlock()
				if err != nil {
					return
				}
				killTestWaitSettled(c, &cur, sids[ci], turnID)
			}
		})
	}

	for range rounds {
		time.Sleep(time.Duration(150+rng.IntN(750)) * time.Millisecond)
		p := cur.Load()
		p.kill()
		<-p.done
		np := c.start()
		cur.Store(np)
		for deadline := time.Now().Add(10 * time.Second); !w.disconnected(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the watcher stayed connected to a killed server")
			}
		}
		if err := w.connect(np); err != nil {
			t.Fatalf("watcher reconnect: %v", err)
		}
	}
	close(stop)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("submissions failed for good: %v", failures)
	}

	p := cur.Load()
	all := map[string][]killTestTurn{}
	for _, sid := range sids {
		turns := killTestSettledTurns(t, c, p, sid)
		for _, tr := range turns {
			all[tr.ClientSubmitID] = append(all[tr.ClientSubmitID], tr)
			if tr.Outcome != "completed" && tr.FailureReason != "execution_status_unknown" && tr.FailureReason != "delivery_unknown" {
				t.Errorf("turn %s settled as %s/%s: neither completed nor explicitly unknown", tr.ID, tr.Outcome, tr.FailureReason)
			}
		}
		var page struct {
			Messages []clusterMessage `json:"messages"`
		}
		c.mustRest(p, http.MethodGet, "/sessions/"+sid+"/messages?limit=1000", nil, &page, http.StatusOK)
		for _, m := range page.Messages {
			if m.Streaming {
				t.Errorf("message %s of a settled turn is still streaming", m.ID)
			}
		}
	}
	unknown := 0
	for _, id := range ids {
		got := all[id]
		if len(got) != 1 {
			t.Errorf("id %s has %d turns, want exactly 1", id, len(got))
			continue
		}
		if want, ok := acked[id]; ok && got[0].ID != want {
			t.Errorf("id %s: acknowledged turn %s, canonical turn %s", id, want, got[0].ID)
		}
		if got[0].Outcome != "completed" {
			unknown++
		}
	}
	if len(all) != len(ids) {
		t.Errorf("%d distinct ids have turns, %d were submitted", len(all), len(ids))
	}
	w.mu.Lock()
	werr := w.err
	w.mu.Unlock()
	if werr != nil {
		t.Errorf("watcher: %v", werr)
	}
	t.Logf("%d submissions over %d kills: %d completed, %d explicitly unknown", len(ids), rounds, len(ids)-unknown, unknown)
}

// killTestSubmit sends one submission and resends it unchanged while the
// answer is retryable or missing (the server may be dead), as a careful
// client does.
func killTestSubmit(c *cluster, cur *atomic.Pointer[serverProc], sid, id string) (string, error) {
	var last string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(30 * time.Millisecond) {
		var res struct {
			Turn  killTestTurn `json:"turn"`
			Error struct {
				Code      string `json:"code"`
				Reason    string `json:"reason"`
				Retryable bool   `json:"retryable"`
			} `json:"error"`
		}
		p := cur.Load()
		code, err := c.rest(p, http.MethodPost, "/sessions/"+sid+"/messages", map[string]any{
			"clientSubmitId": id, "content": map[string]any{"text": "/sim words=30"},
		}, &res)
		switch {
		case err == nil && code == http.StatusOK && res.Turn.ID != "":
			return res.Turn.ID, nil
		case err == nil && res.Error.Reason == "context_lost":
			// The restarted agent process does not know the session: the
			// user chooses to go on in a fresh agent session, which sends
			// the queued prompt; the retry then returns its turn.
			_, _ = c.rest(p, http.MethodPost, "/sessions/"+sid+"/continue-fresh", map[string]any{}, nil)
			continue
		case err == nil && res.Error.Code != "" && !res.Error.Retryable:
			return "", fmt.Errorf("submit %s: %d %s (not retryable)", id, code, res.Error.Code)
		}
		last = fmt.Sprintf("%d %s %v", code, res.Error.Code, err)
	}
	return "", fmt.Errorf("submit %s never answered: %s", id, last)
}

// killTestWaitSettled waits (through restarts) until the turn settles. A
// restarted agent process may not know the session: its queued prompt
// then waits for a member's choice, which the client makes, as it does
// when a submit answers context_lost.
func killTestWaitSettled(c *cluster, cur *atomic.Pointer[serverProc], sid, turnID string) {
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(30 * time.Millisecond) {
		var page struct {
			Turns []killTestTurn `json:"turns"`
		}
		p := cur.Load()
		if code, err := c.rest(p, http.MethodGet, "/sessions/"+sid+"/turns?limit=5", nil, &page); err == nil && code == http.StatusOK {
			for _, tr := range page.Turns {
				if tr.ID == turnID && tr.Phase == "settled" {
					return
				}
			}
		}
		var got struct {
			Session struct {
				ContextLost bool `json:"contextLost"`
			} `json:"session"`
		}
		if code, err := c.rest(p, http.MethodGet, "/sessions/"+sid, nil, &got); err == nil && code == http.StatusOK && got.Session.ContextLost {
			_, _ = c.rest(p, http.MethodPost, "/sessions/"+sid+"/continue-fresh", map[string]any{}, nil)
		}
	}
}

// killTestSettledTurns waits until every turn of the session is settled
// and returns them all.
func killTestSettledTurns(t *testing.T, c *cluster, p *serverProc, sid string) []killTestTurn {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var turns []killTestTurn
		before := int64(0)
		for {
			var page struct {
				Turns      []killTestTurn `json:"turns"`
				NextCursor int64          `json:"nextCursor"`
			}
			path := "/sessions/" + sid + "/turns?limit=200"
			if before > 0 {
				path += "&before=" + strconv.FormatInt(before, 10)
			}
			c.mustRest(p, http.MethodGet, path, nil, &page, http.StatusOK)
			turns = append(turns, page.Turns...)
			if page.NextCursor == 0 || len(page.Turns) == 0 {
				break
			}
			before = page.NextCursor
		}
		open := 0
		for _, tr := range turns {
			if tr.Phase != "settled" {
				open++
			}
		}
		if open == 0 {
			return turns
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s: %d turns never settled: %+v", sid, open, turns)
		}
	}
}
