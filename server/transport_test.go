package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/hub"
	"github.com/ensemble-dev/ensemble/protocol"
)

// A client offering ensemble.v2 gets protocol 2 and may receive several
// events per frame; its events are byte for byte those a protocol-1
// watcher receives one per frame, in the same order, except the end of a
// streamed message: a message_delta with done for v2, the complete
// message_update for v1, at the same seq.
func TestMultiEventFramesOptIn(t *testing.T) {
	e := newEnv(t, envOpts{})
	v1 := e.dial(e.member, false)
	v2 := e.dialProto(e.member, true, protocol.SubprotocolBatch, protocol.Subprotocol)
	if f := v2.next(5 * time.Second); f.Type != "ready" || !strings.Contains(string(f.raw), `"protocol":2`) {
		t.Fatalf("v2 ready: %s", f.raw)
	}
	if !strings.Contains(string(v1.ready.raw), `"protocol":1`) {
		t.Fatalf("v1 ready: %s", v1.ready.raw)
	}
	sess := createSession(t, v1)
	r1 := subscribeSession(t, v1, sess.ID, nil)
	r2 := subscribeSession(t, v2, sess.ID, nil)
	var sr host.SendResult
	v1.must("turn.message.submit", map[string]any{"workspace": testWS, "sessionId": sess.ID,
		"clientSubmitId": "cs-b", "content": map[string]any{"text": "/sim words=400 rate=0\nstream fast"}}, &sr)
	ev1 := collectUntilSettled(t, v1, r1.Sub, r1.Seq, sr.Turn.ID)
	ev2 := collectUntilSettled(t, v2, r2.Sub, r2.Seq, sr.Turn.ID)
	// An event emitted between the two subscribes (the new session's own
	// updates) reaches v1 as an event and v2 inside its snapshot: the seq
	// is the topic's, so compare from the later subscription on.
	ev1 = slices.DeleteFunc(ev1, func(f frame) bool { return f.Seq <= r2.Seq })
	ev2 = slices.DeleteFunc(ev2, func(f frame) bool { return f.Seq <= r1.Seq })
	if len(ev1) != len(ev2) {
		t.Fatalf("v1 saw %d events, v2 %d", len(ev1), len(ev2))
	}
	closes := 0
	for i := range ev1 {
		if string(ev1[i].raw) == string(ev2[i].raw) {
			continue
		}
		var u protocol.MessageUpdate
		var d protocol.MessageDelta
		_ = json.Unmarshal(ev1[i].Payload, &u)
		_ = json.Unmarshal(ev2[i].Payload, &d)
		m := u.Message
		if ev1[i].Seq != ev2[i].Seq || ev1[i].Kind != protocol.KindMessageUpdate || ev2[i].Kind != protocol.KindMessageDelta ||
			!d.Done || m.ID != d.MessageID || m.Streaming || m.Version != d.Version ||
			!strings.HasSuffix(m.Content.Text, d.Text) || host.UTF16Len(m.Content.Text) != d.Offset+host.UTF16Len(d.Text) {
			t.Fatalf("event %d differs other than as a message's end:\n%s\n%s", i, ev1[i].raw, ev2[i].raw)
		}
		closes++
	}
	if closes != 1 {
		t.Fatalf("%d messages ended, want the answer's 1", closes)
	}
	if v1.batches.Load() != 0 {
		t.Fatal("a protocol-1 client got a multi-event frame")
	}
	t.Logf("%d events; v2 got %d multi-event frames", len(ev2), v2.batches.Load())
}

// Idle connections cost one goroutine each (the reader): no writer
// goroutine waits on an idle connection.
func TestIdleConnectionsHaveNoWriterGoroutine(t *testing.T) {
	e := newEnv(t, envOpts{limits: Limits{MaxConnsPerUser: -1}})
	sess := createSession(t, e.dial(e.member, false))
	time.Sleep(200 * time.Millisecond)
	before := runtime.NumGoroutine()
	const n = 100
	for range n {
		cl := e.dial(e.viewer, false)
		subscribeSession(t, cl, sess.ID, nil)
	}
	time.Sleep(300 * time.Millisecond) // writers that served the answers have exited
	// Per connection: this test's client reader, and on the server a
	// reader only where the hub cannot poll sockets for readiness (Linux
	// can: none). The first design had a writer as well.
	limit := 2.1
	if runtime.GOOS == "linux" {
		limit = 1.1
	}
	pooled := int(e.hub.Stats().PooledWorkers) // the hub's, bounded whatever the connections
	if per := float64(runtime.NumGoroutine()-before-pooled) / n; per > limit {
		t.Fatalf("%.2f goroutines per idle connection", per)
	}
}

// startTimed serves e's handler on a second listener with short HTTP timeouts.
func startTimed(t *testing.T, e *env, to HTTPTimeouts) string {
	ts := httptest.NewUnstartedServer(e.srv)
	ts.Config = to.HTTPServer(e.srv)
	ts.Start()
	t.Cleanup(ts.Close)
	return ts.Listener.Addr().String()
}

// A body that trickles in is cut at the read timeout and answered; an
// unauthenticated one is answered at once; neither holds the connection.
func TestSlowBodyIsAnswered(t *testing.T) {
	e := newEnv(t, envOpts{})
	addr := startTimed(t, e, HTTPTimeouts{Read: 700 * time.Millisecond})
	for _, tc := range []struct {
		name, token string
		status      int
	}{{"member", e.member, 400}, {"anonymous", "", 401}} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			hdr := "POST /v1/workspaces/" + testWS + "/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n"
			if tc.token != "" {
				hdr += "Authorization: Bearer " + tc.token + "\r\n"
			}
			if _, err := io.WriteString(c, hdr+"\r\n{"); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			defer close(stop)
			go func() { // one byte every 100 ms: never done within the timeout
				for {
					select {
					case <-stop:
						return
					case <-time.After(100 * time.Millisecond):
						if _, err := c.Write([]byte(" ")); err != nil {
							return
						}
					}
				}
			}()
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if tc.status == 400 && !strings.Contains(string(body), "body_timeout") {
				t.Fatalf("body %s", body)
			}
		})
	}
}

// A keep-alive connection that sends nothing more is closed after the
// idle timeout; one that never sends its headers after ReadHeader.
func TestSilentConnectionsAreClosed(t *testing.T) {
	e := newEnv(t, envOpts{})
	addr := startTimed(t, e, HTTPTimeouts{ReadHeader: 500 * time.Millisecond, Idle: 500 * time.Millisecond})
	closedWithin := func(c net.Conn, d time.Duration) bool {
		_ = c.SetReadDeadline(time.Now().Add(d))
		_, err := io.Copy(io.Discard, c)
		return err == nil // EOF: the server closed it
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !closedWithin(c, 3*time.Second) {
		t.Fatal("a connection without headers was held")
	}
	k, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	io.WriteString(k, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(k)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	start := time.Now()
	_ = k.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("silent keep-alive held: %v after %v", err, time.Since(start))
	}
}

// The HTTP read and write timeouts end at the upgrade: a WebSocket lives
// on past them.
func TestWebSocketOutlivesHTTPTimeouts(t *testing.T) {
	e := newEnv(t, envOpts{})
	addr := startTimed(t, e, HTTPTimeouts{ReadHeader: 300 * time.Millisecond, Read: 300 * time.Millisecond,
		Write: 300 * time.Millisecond, Idle: 300 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws://"+addr+"/v1/ws", &websocket.DialOptions{Subprotocols: []string{protocol.Subprotocol},
		HTTPHeader: http.Header{"Authorization": {"Bearer " + e.member}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	if _, _, err := ws.Read(ctx); err != nil { // ready
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	req := `{"type":"request","id":"x","op":"session.list","input":{"workspace":"` + testWS + `"}}`
	if err := ws.Write(ctx, websocket.MessageText, []byte(req)); err != nil {
		t.Fatal(err)
	}
	_, data, err := ws.Read(ctx)
	if err != nil || !strings.Contains(string(data), `"ok":true`) {
		t.Fatalf("after the HTTP timeouts: %s %v", data, err)
	}
}

// A subscriber that stops reading is closed as a slow consumer with 4008
// and counted in ensemble_hub_slow_consumers_total.
func TestNonReadingSubscriberGets4008(t *testing.T) {
	e := newEnv(t, envOpts{hub: hub.Config{QueueBytes: 256 << 10}, limits: Limits{MaxInFlight: 64, MaxFrameBytes: 1 << 20}})
	a := e.dial(e.member, false)
	sids := make([]string, 32)
	for i := range sids {
		sids[i] = bigSession(t, a)
	}
	raw := rawSubscriber(t, e, sids[0])
	ctx0, cancel0 := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel0()
	for i, sid := range sids { // ~200 KiB answers it does not read
		req := fmt.Sprintf(`{"type":"request","id":"r%d","op":"subscribe","input":{"workspace":%q,"topic":"session","sessionId":%q}}`, i, testWS, sid)
		if err := raw.Write(ctx0, websocket.MessageText, []byte(req)); err != nil {
			break // already closed
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for e.hub.Stats().SlowConsumers == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the non-reading subscriber was never closed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Reading again lets the blocked write finish and the close through.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var err error
	for err == nil {
		_, _, err = raw.Read(ctx)
	}
	if code := websocket.CloseStatus(err); code != hub.CloseSlowConsumer {
		t.Fatalf("closed with %v, want 4008", err)
	}
	if body := e.metricsText(); !strings.Contains(body, "ensemble_hub_slow_consumers_total 1") {
		t.Fatalf("metric not counted:\n%s", grepLines(body, "slow"))
	}
}

// rawSubscriber subscribes to a session and returns the socket unread
// past the answer, with a small receive buffer so it fills quickly.
func rawSubscriber(t *testing.T, e *env, sid string) *websocket.Conn {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(256 << 10) // small, yet not so small that TCP stalls on silly-window avoidance
		}
		return c, err
	}}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, e.wsURL(), &websocket.DialOptions{Subprotocols: []string{protocol.Subprotocol}, HTTPClient: hc,
		HTTPHeader: http.Header{"Authorization": {"Bearer " + e.viewer}}})
	if err != nil {
		t.Fatal(err)
	}
	ws.SetReadLimit(16 << 20)
	t.Cleanup(func() { _ = ws.CloseNow() })
	if _, _, err := ws.Read(ctx); err != nil { // ready
		t.Fatal(err)
	}
	sub := fmt.Sprintf(`{"type":"request","id":"s","op":"subscribe","input":{"workspace":%q,"topic":"session","sessionId":%q}}`, testWS, sid)
	if err := ws.Write(ctx, websocket.MessageText, []byte(sub)); err != nil {
		t.Fatal(err)
	}
	for {
		_, data, err := ws.Read(ctx)
		if err != nil || strings.Contains(string(data), `"type":"response"`) {
			if err != nil || !strings.Contains(string(data), `"ok":true`) {
				t.Fatalf("subscribe: %s %v", data, err)
			}
			return ws
		}
	}
}

func (e *env) metricsText() string {
	resp, err := http.Get(e.ts.URL + "/metrics")
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Re-subscribing without reading queues one snapshot per topic, not one
// per request: older unsent answers become small superseded errors.
func TestResubscribeAmplificationIsBounded(t *testing.T) {
	e := newEnv(t, envOpts{limits: Limits{MaxInFlight: 256, RequestBurst: 400, MaxFrameBytes: 1 << 20, MaxSubscribes: 512}})
	a := e.dial(e.member, false)
	sid := bigSession(t, a)
	snap := subscribeSession(t, a, sid, nil)
	snapBytes, _ := json.Marshal(snap)
	sess := host.Session{ID: sid}
	raw := rawSubscriber(t, e, sess.ID)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const n = 100
	for i := range n {
		req := fmt.Sprintf(`{"type":"request","id":"r%d","op":"subscribe","input":{"workspace":%q,"topic":"session","sessionId":%q}}`, i, testWS, sess.ID)
		if err := raw.Write(ctx, websocket.MessageText, []byte(req)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { return e.hub.Stats().Superseded > 0 })
	time.Sleep(200 * time.Millisecond)
	// Unsent: at most a couple of full answers (one being written, the
	// newest queued) plus small superseded errors.
	if q, bound := e.hub.Stats().QueuedBytes, int64(3*len(snapBytes)); q > bound {
		t.Fatalf("%d bytes queued for one connection re-subscribing %d times (snapshot %d bytes)", q, n, len(snapBytes))
	}
	ok, superseded := 0, 0
	for ok+superseded < n {
		_, data, err := raw.Read(ctx)
		if err != nil {
			t.Fatalf("after %d answers: %v", ok+superseded, err)
		}
		head := string(data[:min(len(data), 64)]) // a full answer is large: decode only the small ones
		switch {
		case !strings.HasPrefix(head, `{"type":"response"`):
		case strings.Contains(head, `"ok":true`):
			ok++
		default:
			var f frame
			mustJSON(t, data, &f)
			if f.Error == nil || f.Error.Reason != "superseded" || f.Error.Code != protocol.CodeOperationConflict {
				t.Fatalf("answer %s", data)
			}
			superseded++
		}
	}
	if superseded == 0 || ok == 0 {
		t.Fatalf("ok %d, superseded %d", ok, superseded)
	}
	t.Logf("snapshot %d bytes; %d answered in full, %d superseded", len(snapBytes), ok, superseded)
}

// Drain: requests in flight finish, new ones are refused as retryable,
// then each client is told to reconnect after a jittered delay and closed
// with 4001.
func TestDrainFinishesInFlightThenSaysReconnect(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.srv.cfg.ReconnectJitter = 2 * time.Second
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	hook := func(op string) {
		if op == "session.get" {
			started <- struct{}{}
			<-release
		}
	}
	e.srv.onRequest.Store(&hook)
	cl := e.dial(e.member, false)
	cl.send(map[string]any{"type": "request", "id": "held", "op": "session.get", "input": map[string]any{"workspace": testWS, "sessionId": "ses_x"}})
	<-started
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- e.srv.Shutdown(ctx)
	}()
	waitFor(t, func() bool { return e.srv.draining.Load() })
	if f := cl.request("session.list", map[string]any{"workspace": testWS}); f.OK || f.Error.Reason != "draining" || !f.Error.Retryable {
		t.Fatalf("request while draining: %s", f.raw)
	}
	close(release)
	if f := cl.await("held"); f.OK || f.Error.Code != protocol.CodeNotFound {
		t.Fatalf("the in-flight request did not finish: %s", f.raw)
	}
	var rc struct {
		Type    string `json:"type"`
		AfterMs int64  `json:"afterMs"`
	}
	for {
		f := cl.next(5 * time.Second)
		if f.Type == "reconnect" {
			mustJSON(t, f.raw, &rc)
			break
		}
	}
	if rc.AfterMs < 0 || rc.AfterMs >= 2000 {
		t.Fatalf("reconnect delay %d ms", rc.AfterMs)
	}
	if code := cl.closeStatus(5 * time.Second); code != hub.CloseShutdown {
		t.Fatalf("close %d", code)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Subscribes beyond MaxSubscribes at once are refused as retryable with a
// back-off hint; a slot freed admits the retry.
func TestSubscribeAdmissionGivesRetryAfter(t *testing.T) {
	e := newEnv(t, envOpts{limits: Limits{MaxSubscribes: 1}})
	cl := e.dial(e.member, false)
	sess := createSession(t, cl)
	e.srv.subscribeSlots <- struct{}{} // another subscribe holds the only slot
	in := map[string]any{"workspace": testWS, "topic": "session", "sessionId": sess.ID}
	f := cl.request("subscribe", in)
	if f.OK || f.Error.Code != protocol.CodeUnavailable || !f.Error.Retryable || f.Error.RetryAfterMs <= 0 {
		t.Fatalf("subscribe over the limit: %s", f.raw)
	}
	<-e.srv.subscribeSlots
	if f := cl.request("subscribe", in); !f.OK {
		t.Fatalf("subscribe after the slot freed: %s", f.raw)
	}
}

// bigSession creates a session whose snapshot is ~200 KiB (its prompt).
func bigSession(t *testing.T, cl *client) string {
	t.Helper()
	var res protocol.CreateSessionResult
	cl.must("session.create", map[string]any{"workspace": testWS, "title": "big",
		"content": map[string]any{"text": "/sim words=1\n" + strings.Repeat("big snapshot ", 200<<10/13)}}, &res)
	return res.Session.ID
}

// Every client hears the drain's reconnect hint within the grace period,
// even when clients stop reading after it (they wait their jittered delay)
// and so hold their close handshakes open: closing in batches that each
// waited for their handshakes told only the first batch.
func TestDrainTellsEveryClientBeforeWaitingOnHandshakes(t *testing.T) {
	const n = 100
	e := newEnv(t, envOpts{limits: Limits{MaxConnsPerUser: n}})
	e.srv.cfg.ReconnectJitter = time.Second
	told := make(chan bool, n)
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, _, err := websocket.Dial(ctx, e.wsURL(), &websocket.DialOptions{Subprotocols: []string{protocol.Subprotocol},
			HTTPHeader: http.Header{"Authorization": {"Bearer " + e.member}}})
		cancel()
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		t.Cleanup(func() { _ = c.CloseNow() })
		go func() {
			for {
				_, data, err := c.Read(context.Background())
				if err != nil {
					told <- false
					return
				}
				if bytes.Contains(data, []byte(`"type":"reconnect"`)) {
					told <- true // and read no more: the handshake stays open
					return
				}
			}
		}()
	}
	waitFor(t, func() bool { return e.srv.cfg.Hub.Stats().Connections == n })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = e.srv.Shutdown(ctx) // the held handshakes run out the grace period
	heard := 0
	for range n {
		if <-told {
			heard++
		}
	}
	if heard != n {
		t.Fatalf("%d of %d clients heard the reconnect hint", heard, n)
	}
}
