package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/coder/websocket"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/internal/testenv"
)

// The tests in this file run several replicas of the real binary against
// one canonical store and one Redis, the way a cluster runs.

// clusterRedis returns the shared test Redis URL or skips.
func clusterRedis(t *testing.T) string {
	t.Helper()
	u := testenv.RedisURL()
	o, err := redis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(o)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		testenv.Missing(t, "Redis", err)
	}
	return u
}

// cluster is a set of replicas sharing a store and a Redis. Every replica
// gets the same data dir (and so the same signing secret); the workspace is
// unique per test so tests sharing one Redis never see each other's facts.
type cluster struct {
	t        *testing.T
	dataDir  string
	ws       string
	args     []string
	replicas []*serverProc
}

// clusterPostgres creates a schema of its own on the test PostgreSQL (or
// skips) and returns a database URL whose connections use it; the schema
// is dropped when the test ends.
func clusterPostgres(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, testenv.PostgresURL())
	if err != nil {
		testenv.Missing(t, "PostgreSQL", err)
	}
	defer admin.Close(context.Background())
	schema := strings.ToLower(strings.ReplaceAll(host.RandomID("ens_cluster"), "-", "_"))
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, testenv.PostgresURL())
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
	})
	u, err := url.Parse(testenv.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func newCluster(t *testing.T, redisURL string, n int, extra ...string) *cluster {
	t.Helper()
	c := &cluster{t: t, dataDir: t.TempDir(), ws: strings.ToLower(host.RandomID("ws"))}
	c.args = append([]string{"--redis-url", redisURL, "--database-url", clusterPostgres(t),
		"--workspace", c.ws, "--sim-rate", "5ms",
		// The tests act as one user with many clients; the per-user limits
		// would spread their deliberate bursts out.
		"--http-request-rate", "-1", "--ws-request-rate", "-1", "--max-conns-per-user", "-1"}, extra...)
	for range n {
		c.replicas = append(c.replicas, c.start())
	}
	return c
}

func (c *cluster) start() *serverProc {
	return startServer(c.t, c.dataDir, c.args...)
}

// rest makes one REST call on replica p in the cluster's workspace.
func (c *cluster) rest(p *serverProc, method, path string, body, out any) (int, error) {
	var rd *strings.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	} else {
		rd = strings.NewReader("")
	}
	req, err := http.NewRequest(method, "http://"+p.addr+"/v1/workspaces/"+c.ws+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+p.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return resp.StatusCode, err
		}
	}
	return resp.StatusCode, nil
}

func (c *cluster) mustRest(p *serverProc, method, path string, body, out any, want int) {
	c.t.Helper()
	code, err := c.rest(p, method, path, body, out)
	if err != nil || code != want {
		c.t.Fatalf("%s %s on %s: %d %v (want %d)", method, path, p.addr, code, err, want)
	}
}

func (c *cluster) createSession(p *serverProc) string {
	c.t.Helper()
	var res struct {
		Session struct {
			ID string `json:"id"`
		} `json:"session"`
	}
	c.mustRest(p, http.MethodPost, "/sessions", map[string]any{"title": "cluster"}, &res, http.StatusCreated)
	return res.Session.ID
}

type clusterMessage struct {
	ID        string `json:"id"`
	TurnID    string `json:"turnId"`
	Role      string `json:"role"`
	Kind      string `json:"kind"`
	Version   int64  `json:"version"`
	Streaming bool   `json:"streaming"`
	Content   struct {
		Text string `json:"text"`
	} `json:"content"`
}

type clusterTurn struct {
	ID            string `json:"id"`
	Phase         string `json:"phase"`
	Outcome       string `json:"outcome"`
	FailureReason string `json:"failureReason"`
}

// canonical reads the session's messages (by id) and newest turn from p.
func (c *cluster) canonical(p *serverProc, sid string) (map[string]string, clusterTurn) {
	c.t.Helper()
	var page struct {
		Messages []clusterMessage `json:"messages"`
	}
	c.mustRest(p, http.MethodGet, "/sessions/"+sid+"/messages?limit=1000", nil, &page, http.StatusOK)
	texts := map[string]string{}
	for _, m := range page.Messages {
		texts[m.ID] = m.Content.Text
	}
	var turns struct {
		Turns []clusterTurn `json:"turns"`
	}
	c.mustRest(p, http.MethodGet, "/sessions/"+sid+"/turns?limit=1", nil, &turns, http.StatusOK)
	var tr clusterTurn
	if len(turns.Turns) > 0 {
		tr = turns.Turns[0]
	}
	return texts, tr
}

// watcher is one WebSocket client watching a session topic: it applies the
// snapshot and every event the way a client does, checking seq is gap-free
// and each delta lands exactly at the end of its message, and remembers
// the order in which message text grew.
type watcher struct {
	t   *testing.T
	c   *cluster
	sid string

	mu       sync.Mutex
	conn     *websocket.Conn
	cancel   context.CancelFunc
	done     chan struct{}
	epoch    string
	sub      string
	seq      int64
	texts    map[string][]uint16
	turns    map[string]clusterTurn
	deltas   int // message_delta events applied
	streamed int // events applied while the turn streamed
	err      error
	wake     chan struct{}
	// pos is the durable stream position (resume on any replica);
	// recovered and changes describe the last subscribe's answer.
	pos       *streamPosition
	recovered bool
	changes   []clusterMessage
	// record, when set, collects the text each message gained from the
	// events applied.
	record map[string]string
	// goals are the goal_state payloads applied, in order.
	goals []json.RawMessage
}

type streamPosition struct {
	Epoch   string `json:"epoch"`
	Version int64  `json:"version"`
}

type wsFrame struct {
	Type    string          `json:"type"`
	ID      string          `json:"id"`
	OK      bool            `json:"ok"`
	Result  json.RawMessage `json:"result"`
	Error   json.RawMessage `json:"error"`
	Sub     string          `json:"sub"`
	Epoch   string          `json:"epoch"`
	Seq     int64           `json:"seq"`
	Kind    string          `json:"kind"`
	Version int64           `json:"version"`
	Payload json.RawMessage `json:"payload"`
}

func (c *cluster) watch(p *serverProc, sid string) *watcher {
	c.t.Helper()
	w := &watcher{t: c.t, c: c, sid: sid, texts: map[string][]uint16{}, turns: map[string]clusterTurn{}, wake: make(chan struct{}, 1)}
	if err := w.connect(p); err != nil {
		c.t.Fatalf("watch on %s: %v", p.addr, err)
	}
	c.t.Cleanup(w.close)
	return w
}

// connect (re)subscribes on replica p, resuming from what was applied.
func (w *watcher) connect(p *serverProc) error {
	ctx, cancel := context.WithCancel(context.Background())
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	conn, _, err := websocket.Dial(dctx, "ws://"+p.addr+"/v1/ws", &websocket.DialOptions{
		Subprotocols: []string{"ensemble.v1"},
		HTTPHeader:   http.Header{"Authorization": {"Bearer " + p.token}},
	})
	if err != nil {
		cancel()
		return err
	}
	conn.SetReadLimit(16 << 20)
	read := func() (wsFrame, error) {
		var f wsFrame
		_, data, err := conn.Read(dctx)
		if err == nil {
			err = json.Unmarshal(data, &f)
		}
		return f, err
	}
	if f, err := read(); err != nil || f.Type != "ready" {
		cancel()
		conn.CloseNow()
		return fmt.Errorf("no ready frame: %+v %v", f, err)
	}
	in := map[string]any{"workspace": w.c.ws, "topic": "session", "sessionId": w.sid}
	w.mu.Lock()
	if w.epoch != "" {
		in["resume"] = map[string]any{"epoch": w.epoch, "seq": w.seq}
	}
	if w.pos != nil {
		in["position"] = w.pos
	}
	w.mu.Unlock()
	req, _ := json.Marshal(map[string]any{"type": "request", "id": "sub", "op": "subscribe", "input": in})
	if err := conn.Write(dctx, websocket.MessageText, req); err != nil {
		cancel()
		conn.CloseNow()
		return err
	}
	var pending []wsFrame
	for {
		f, err := read()
		if err != nil {
			cancel()
			conn.CloseNow()
			return err
		}
		if f.Type == "event" {
			pending = append(pending, f) // events up to the answer's seq are discarded below
			continue
		}
		if f.Type != "response" || f.ID != "sub" {
			continue
		}
		if !f.OK {
			cancel()
			conn.CloseNow()
			return fmt.Errorf("subscribe: %s", f.Error)
		}
		var res struct {
			Sub       string          `json:"sub"`
			Epoch     string          `json:"epoch"`
			Seq       int64           `json:"seq"`
			Recovered bool            `json:"recovered"`
			Snapshot  json.RawMessage `json:"snapshot"`
			Position  *streamPosition `json:"position"`
			Changes   *struct {
				Messages []clusterMessage `json:"messages"`
			} `json:"changes"`
		}
		if err := json.Unmarshal(f.Result, &res); err != nil {
			cancel()
			conn.CloseNow()
			return err
		}
		w.mu.Lock()
		w.sub, w.epoch, w.seq = res.Sub, res.Epoch, res.Seq
		w.recovered, w.changes = res.Recovered, nil
		if res.Position != nil {
			w.pos = res.Position
		}
		if res.Changes != nil {
			// Complete messages changed after the position.
			w.changes = res.Changes.Messages
			for _, m := range res.Changes.Messages {
				w.texts[m.ID] = utf16.Encode([]rune(m.Content.Text))
			}
		}
		if !res.Recovered {
			var snap struct {
				Messages []clusterMessage `json:"messages"`
				Turns    []clusterTurn    `json:"turns"`
			}
			if err := json.Unmarshal(res.Snapshot, &snap); err != nil {
				w.mu.Unlock()
				cancel()
				conn.CloseNow()
				return err
			}
			// A fresh snapshot replaces what the client had.
			w.texts = map[string][]uint16{}
			for _, m := range snap.Messages {
				w.texts[m.ID] = utf16.Encode([]rune(m.Content.Text))
			}
			for _, tr := range snap.Turns {
				w.turns[tr.ID] = tr
			}
		}
		for _, ev := range pending {
			if ev.Seq > w.seq {
				w.applyLocked(ev)
			}
		}
		w.conn, w.cancel, w.done = conn, cancel, make(chan struct{})
		w.mu.Unlock()
		break
	}
	go w.readLoop(ctx, conn, w.done)
	return nil
}

func (w *watcher) readLoop(ctx context.Context, conn *websocket.Conn, done chan struct{}) {
	defer close(done)
	for {
		_, data, err := conn.Read(ctx)
		if err != nil {
			return
		}
		var f wsFrame
		if err := json.Unmarshal(data, &f); err != nil || f.Type != "event" {
			if f.Type == "ping" {
				_ = conn.Write(ctx, websocket.MessageText, []byte(`{"type":"pong"}`))
			}
			continue
		}
		w.mu.Lock()
		w.applyLocked(f)
		w.mu.Unlock()
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

func (w *watcher) applyLocked(f wsFrame) {
	if w.err != nil || f.Sub != w.sub {
		return
	}
	if f.Epoch != w.epoch || f.Seq != w.seq+1 {
		w.err = fmt.Errorf("gap: after %s/%d got %s/%d", w.epoch, w.seq, f.Epoch, f.Seq)
		return
	}
	w.seq = f.Seq
	if f.Version > 0 && w.pos != nil {
		w.pos.Version = f.Version
	}
	switch f.Kind {
	case "message_update":
		var p struct {
			Message clusterMessage `json:"message"`
		}
		_ = json.Unmarshal(f.Payload, &p)
		if w.record != nil { // what this update added to the text held
			held, text := string(utf16.Decode(w.texts[p.Message.ID])), p.Message.Content.Text
			if !strings.HasPrefix(text, held) {
				w.err = fmt.Errorf("message_update for %s rewrote text the client held", p.Message.ID)
				return
			}
			w.record[p.Message.ID] += text[len(held):]
		}
		w.texts[p.Message.ID] = utf16.Encode([]rune(p.Message.Content.Text))
		if p.Message.Streaming {
			w.streamed++
		}
	case "message_delta":
		var p struct {
			MessageID string `json:"messageId"`
			Offset    int    `json:"offset"`
			Text      string `json:"text"`
		}
		_ = json.Unmarshal(f.Payload, &p)
		cur := w.texts[p.MessageID]
		if p.Offset != len(cur) {
			w.err = fmt.Errorf("delta for %s at %d, client holds %d units (duplicate or gap)", p.MessageID, p.Offset, len(cur))
			return
		}
		w.texts[p.MessageID] = append(cur, utf16.Encode([]rune(p.Text))...)
		if w.record != nil {
			w.record[p.MessageID] += p.Text
		}
		w.deltas++
		w.streamed++
	case "turn_update":
		var p struct {
			Turn clusterTurn `json:"turn"`
		}
		_ = json.Unmarshal(f.Payload, &p)
		w.turns[p.Turn.ID] = p.Turn
	case "goal_state":
		w.goals = append(w.goals, f.Payload)
	}
}

func (w *watcher) close() {
	w.mu.Lock()
	conn, cancel, done := w.conn, w.cancel, w.done
	w.mu.Unlock()
	if conn == nil {
		return
	}
	cancel()
	conn.CloseNow()
	<-done
}

// disconnected reports whether the connection ended (its replica died).
func (w *watcher) disconnected() bool {
	w.mu.Lock()
	done := w.done
	w.mu.Unlock()
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// waitTurn waits until the watcher has seen turnID settled and its texts
// match want (the canonical transcript); it fails on any gap or misplaced
// delta.
func (w *watcher) waitTurn(turnID string, want map[string]string) {
	w.t.Helper()
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	for {
		w.mu.Lock()
		err := w.err
		tr := w.turns[turnID]
		match := tr.Phase == "settled" && w.matchesLocked(want)
		w.mu.Unlock()
		if err != nil {
			w.t.Fatalf("watcher: %v", err)
		}
		if match {
			return
		}
		select {
		case <-w.wake:
		case <-time.After(200 * time.Millisecond):
		case <-deadline.C:
			w.mu.Lock()
			defer w.mu.Unlock()
			w.t.Fatalf("watcher never converged: turn %+v, err %v\nwant %q\nhave %q", w.turns[turnID], w.err, want, w.textsLocked())
		}
	}
}

func (w *watcher) matchesLocked(want map[string]string) bool {
	for id, text := range want {
		if string(utf16.Decode(w.texts[id])) != text {
			return false
		}
	}
	return true
}

func (w *watcher) textsLocked() map[string]string {
	out := map[string]string{}
	for id, u := range w.texts {
		out[id] = string(utf16.Decode(u))
	}
	return out
}

// submit sends one prompt on replica p and returns its turn id.
func (c *cluster) submit(p *serverProc, sid, clientSubmitID, text string) string {
	c.t.Helper()
	var res struct {
		Turn clusterTurn `json:"turn"`
	}
	c.mustRest(p, http.MethodPost, "/sessions/"+sid+"/messages", map[string]any{
		"clientSubmitId": clientSubmitID, "content": map[string]any{"text": text},
	}, &res, http.StatusOK)
	return res.Turn.ID
}

// waitSettled polls replica p until the turn settles.
func (c *cluster) waitSettled(p *serverProc, sid, turnID string) clusterTurn {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, tr := c.canonical(p, sid)
		if tr.ID == turnID && tr.Phase == "settled" {
			return tr
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("turn %s never settled: %+v", turnID, tr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Watchers on two other replicas see the answer to a prompt submitted on a
// third stream in live, gap-free, each delta in place, ending with exactly
// the canonical transcript.
func TestClusterWatchersOnOtherReplicasSeeTheAnswerLive(t *testing.T) {
	c := newCluster(t, clusterRedis(t), 3)
	a, b, cc := c.replicas[0], c.replicas[1], c.replicas[2]
	sid := c.createSession(a)
	wb, wc := c.watch(b, sid), c.watch(cc, sid)

	turnID := c.submit(a, sid, "live-1", "/sim words=400 rate=5ms")
	c.waitSettled(a, sid, turnID)
	want, tr := c.canonical(a, sid)
	if tr.Outcome != "completed" {
		t.Fatalf("turn: %+v", tr)
	}
	wb.waitTurn(turnID, want)
	wc.waitTurn(turnID, want)
	for name, w := range map[string]*watcher{"B": wb, "C": wc} {
		w.mu.Lock()
		streamed := w.streamed
		w.mu.Unlock()
		// Live: the answer arrived in many pieces while it streamed, not
		// as one snapshot at the end.
		if streamed < 5 {
			t.Fatalf("watcher on %s saw only %d streaming events", name, streamed)
		}
	}
	// The facts reached B through Redis, and A owns the session.
	if v := metric(t, b, "ensemble_bus_received_total"); v <= 0 {
		t.Fatalf("B received %v fact messages from Redis", v)
	}
	if v := metric(t, a, "ensemble_session_leases_held"); v != 1 {
		t.Fatalf("A holds %v session leases, want 1", v)
	}
}

// metric reads one unlabelled sample from a replica's /metrics.
func metric(t *testing.T, p *serverProc, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("%s not in /metrics", name)
	return 0
}

// submitRetrying sends one submit and retries it unchanged (same
// clientSubmitId) while the answer is retryable, as a careful client does.
func (c *cluster) submitRetrying(p *serverProc, sid, clientSubmitID, text string) (clusterTurn, bool, error) {
	var res struct {
		Turn     clusterTurn `json:"turn"`
		Replayed bool        `json:"replayed"`
		Error    struct {
			Code      string `json:"code"`
			Retryable bool   `json:"retryable"`
		} `json:"error"`
	}
	for attempt := 0; ; attempt++ {
		res.Error.Code, res.Error.Retryable = "", false
		code, err := c.rest(p, http.MethodPost, "/sessions/"+sid+"/messages", map[string]any{
			"clientSubmitId": clientSubmitID, "content": map[string]any{"text": text},
		}, &res)
		if err == nil && code == http.StatusOK {
			return res.Turn, res.Replayed, nil
		}
		if attempt >= 50 || (err == nil && !res.Error.Retryable) {
			return clusterTurn{}, false, fmt.Errorf("submit on %s: %d %s %v", p.addr, code, res.Error.Code, err)
		}
		time.Sleep(time.Duration(10+attempt*10) * time.Millisecond)
	}
}

// 1,000 concurrent submits of one clientSubmitId spread over three
// replicas: one turn, one provider dispatch, everyone gets that turn.
func TestClusterOneClientSubmitIDThousandSubmitsOneTurn(t *testing.T) {
	c := newCluster(t, clusterRedis(t), 3)
	sid := c.createSession(c.replicas[0])
	const n = 1000
	type result struct {
		turn     clusterTurn
		replayed bool
		err      error
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			tr, rep, err := c.submitRetrying(c.replicas[i%3], sid, "one-id", "/sim words=40\nsame prompt")
			results[i] = result{tr, rep, err}
		})
	}
	close(start)
	wg.Wait()
	fresh := 0
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("submit %d: %v", i, r.err)
		}
		if r.turn.ID == "" || r.turn.ID != results[0].turn.ID {
			t.Fatalf("submit %d got turn %q, submit 0 got %q", i, r.turn.ID, results[0].turn.ID)
		}
		if !r.replayed {
			fresh++
		}
	}
	if fresh != 1 {
		t.Fatalf("%d submits admitted fresh, want exactly 1", fresh)
	}
	tr := c.waitSettled(c.replicas[1], sid, results[0].turn.ID)
	if tr.Outcome != "completed" {
		t.Fatalf("turn: %+v", tr)
	}
	var turns struct {
		Turns []clusterTurn `json:"turns"`
	}
	c.mustRest(c.replicas[2], http.MethodGet, "/sessions/"+sid+"/turns?limit=200", nil, &turns, http.StatusOK)
	if len(turns.Turns) != 1 {
		t.Fatalf("%d turns, want 1", len(turns.Turns))
	}
	// One dispatch: the agent answered once (the sim answers every prompt
	// it receives; a second dispatch would be a second answer).
	var page struct {
		Messages []clusterMessage `json:"messages"`
	}
	c.mustRest(c.replicas[2], http.MethodGet, "/sessions/"+sid+"/messages?limit=1000", nil, &page, http.StatusOK)
	users, agents := 0, 0
	for _, m := range page.Messages {
		switch {
		case m.Role == "user":
			users++
		case m.Role == "agent" && m.Kind == "text":
			agents++
		}
	}
	if users != 1 || agents != 1 {
		t.Fatalf("%d prompts and %d answers in the transcript, want 1 and 1", users, agents)
	}
}

// SIGKILL the replica that runs a streaming turn: another replica takes
// the session over and settles the turn failed/execution_status_unknown,
// watchers reconnect to survivors, and every watcher ends with the same
// canonical state, with no gap and no duplicate along the way.
func TestClusterOwnerKilledMidTurn(t *testing.T) {
	c := newCluster(t, clusterRedis(t), 3, "--session-lease", "2s")
	a, b, cc := c.replicas[0], c.replicas[1], c.replicas[2]
	sid := c.createSession(a)
	wa, wb := c.watch(a, sid), c.watch(b, sid)
	turnID := c.submit(a, sid, "doomed", "/sim words=100000 rate=10ms")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		wb.mu.Lock()
		d := wb.deltas
		wb.mu.Unlock()
		if d >= 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the answer never streamed to B")
		}
	}
	a.kill()
	<-a.done
	// A's agent context dies with A. The replicas of this test share one
	// data dir, and so the sim's session files, which separate machines
	// would not: remove them, as A's disk would be gone.
	if err := os.RemoveAll(simStateDir(c.dataDir)); err != nil {
		t.Fatal(err)
	}
	// A's watcher lost its connection; it reconnects to a survivor.
	for deadline := time.Now().Add(10 * time.Second); !wa.disconnected(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the watcher on the killed replica stayed connected")
		}
	}
	if err := wa.connect(cc); err != nil {
		t.Fatal(err)
	}
	tr := c.waitSettled(b, sid, turnID)
	if tr.Outcome != "failed" || tr.FailureReason != "execution_status_unknown" {
		t.Fatalf("the dead owner's turn settled as %+v", tr)
	}
	want, _ := c.canonical(cc, sid)
	wa.waitTurn(turnID, want)
	wb.waitTurn(turnID, want)
	// The session is usable again, from any replica, once a member chose
	// to continue without the agent context that died with A's agent.
	var refused struct {
		Error struct {
			Reason string `json:"reason"`
		} `json:"error"`
	}
	c.mustRest(cc, http.MethodPost, "/sessions/"+sid+"/messages", map[string]any{
		"clientSubmitId": "after", "content": map[string]any{"text": "/sim words=5"},
	}, &refused, http.StatusConflict)
	if refused.Error.Reason != "context_lost" {
		t.Fatalf("submit after the takeover: %+v", refused)
	}
	c.mustRest(b, http.MethodPost, "/sessions/"+sid+"/continue-fresh", map[string]any{}, nil, http.StatusOK)
	next := c.submit(cc, sid, "after", "/sim words=5")
	if tr := c.waitSettled(b, sid, next); tr.Outcome != "completed" {
		t.Fatalf("prompt after the takeover: %+v", tr)
	}
	want, _ = c.canonical(b, sid)
	wa.waitTurn(next, want)
	wb.waitTurn(next, want)
}

// ownRedis runs a private redis-server on a loopback port, so restarting
// it never disturbs the shared one.
type ownRedis struct {
	port int
	dir  string
	cmd  *exec.Cmd
}

func startOwnRedis(t *testing.T, port int, dir string) *ownRedis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		testenv.Missing(t, "redis-server", err)
	}
	if port == 0 {
		_, p, _ := net.SplitHostPort(freeAddr(t))
		port, _ = strconv.Atoi(p)
	}
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "",
		"--appendonly", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &ownRedis{port: port, dir: dir, cmd: cmd}
	t.Cleanup(r.stop)
	cl := redis.NewClient(&redis.Options{Addr: r.addr()})
	defer cl.Close()
	for deadline := time.Now().Add(15 * time.Second); cl.Ping(context.Background()).Err() != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("own redis-server on %d never answered", port)
		}
	}
	return r
}

func (r *ownRedis) addr() string { return fmt.Sprintf("127.0.0.1:%d", r.port) }
func (r *ownRedis) url() string  { return "redis://" + r.addr() + "/0" }

func (r *ownRedis) stop() {
	if r.cmd.ProcessState == nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
	}
}

// Redis restarts while an answer streams: nothing canonical is lost, the
// watcher on the other replica is resynced once Redis is back and ends
// with exactly the canonical transcript, gap-free.
func TestClusterRedisRestartMidTurn(t *testing.T) {
	dir := t.TempDir()
	rs := startOwnRedis(t, 0, dir)
	c := newCluster(t, rs.url(), 2)
	a, b := c.replicas[0], c.replicas[1]
	sid := c.createSession(a)
	wb := c.watch(b, sid)
	turnID := c.submit(a, sid, "through-restart", "/sim words=1500 rate=5ms")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		wb.mu.Lock()
		d := wb.deltas
		wb.mu.Unlock()
		if d >= 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the answer never streamed to B")
		}
	}
	rs.stop()
	// While Redis is gone the turn goes on committing on A.
	before, _ := c.canonical(a, sid)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		now, _ := c.canonical(a, sid)
		if agentLen(now) > agentLen(before) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("nothing committed while Redis was down")
		}
	}
	startOwnRedis(t, rs.port, dir)
	back := time.Now()
	// Resynced: the watcher catches up with everything committed while
	// Redis was away (the stream is still going, so it only grows).
	atReturn, _ := c.canonical(a, sid)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		wb.mu.Lock()
		have, err := agentLen(wb.textsLocked()), wb.err
		wb.mu.Unlock()
		if err != nil {
			t.Fatalf("watcher: %v", err)
		}
		if have >= agentLen(atReturn) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the watcher on B was never resynced after Redis returned")
		}
	}
	t.Logf("watcher on B resynced %s after Redis returned", time.Since(back).Round(time.Millisecond))
	tr := c.waitSettled(a, sid, turnID)
	if tr.Outcome != "completed" {
		t.Fatalf("turn: %+v", tr)
	}
	want, _ := c.canonical(b, sid)
	wb.waitTurn(turnID, want)
}

func agentLen(texts map[string]string) int {
	n := 0
	for _, s := range texts {
		n += len(s)
	}
	return n
}
