package hub

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/protocol"
)

// fakeReader serves canned state; GetSession can be held to widen races.
type fakeReader struct {
	mu       sync.Mutex
	sessions map[string]host.Session
	hold     chan struct{} // when set, GetSession waits on it
	entered  chan struct{}
	gets     atomic.Int64
}

func (f *fakeReader) GetSession(_ context.Context, ws, id string) (host.Session, error) {
	f.gets.Add(1)
	f.mu.Lock()
	hold, entered := f.hold, f.entered
	f.mu.Unlock()
	if hold != nil {
		entered <- struct{}{}
		<-hold
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sessions[id]
	if !ok {
		return host.Session{}, host.Errorf(host.CodeNotFound, "no")
	}
	return s, nil
}

func (f *fakeReader) SessionChanges(ctx context.Context, ws, id string, _ host.ChangesQuery) (host.Changes, error) {
	s, err := f.GetSession(ctx, ws, id)
	return host.Changes{Session: s, Turns: []host.Turn{}, Messages: []host.Message{}}, err
}

func (f *fakeReader) ListSessions(context.Context, string, host.SessionQuery) (host.SessionPage, error) {
	return host.SessionPage{}, nil
}
func (f *fakeReader) GetSessionInteractionTreeSnapshot(_ context.Context, ws, root string) (host.InteractionTree, error) {
	return host.InteractionTree{WorkspaceID: ws, RootSessionID: root}, nil
}

func (f *fakeReader) ListTurnInteractions(context.Context, string, string, int64, int64) ([]host.Interaction, error) {
	return nil, nil
}

// A run of consecutive facts of one workspace reaches each subscriber in
// one call (the hub writes their events together); facts keep their order.
func TestLocalBus(t *testing.T) {
	b := NewLocalBus()
	var got [][]host.Fact
	var unsub func()
	unsub = b.Subscribe("w", func(fs []host.Fact) {
		got = append(got, fs)
		unsub() // unsubscribing from inside the callback must not deadlock
	})
	var other [][]host.Fact
	b.Subscribe("x", func(fs []host.Fact) { other = append(other, fs) })
	_ = b.Publish(context.Background(), []host.Fact{{WorkspaceID: "w", SessionID: "s"}, {WorkspaceID: "w", SessionID: "t"},
		{WorkspaceID: "x", SessionID: "u"}, {WorkspaceID: "w", SessionID: "v"}})
	if len(got) != 1 || len(got[0]) != 2 || got[0][0].SessionID != "s" || got[0][1].SessionID != "t" {
		t.Fatalf("w's subscriber got %v, want one call with s and t (then it unsubscribed)", got)
	}
	if len(other) != 1 || len(other[0]) != 1 || other[0][0].SessionID != "u" {
		t.Fatalf("x's subscriber got %v, want one call with u", other)
	}
	if b.Workspaces() != 1 {
		t.Fatalf("workspaces %d", b.Workspaces())
	}
}

// TestRereadCoalesces: however many facts arrive while a reread runs, the
// topic is reread once more, not once per fact.
func TestRereadCoalesces(t *testing.T) {
	fr := &fakeReader{sessions: map[string]host.Session{"s1": {WorkspaceID: "w", ID: "s1"}},
		hold: make(chan struct{}), entered: make(chan struct{}, 1)}
	bus := NewLocalBus()
	h := New(Config{Reader: fr, Bus: bus, Workers: 4})
	defer h.Close()
	tp, err := h.acquire(kindWorkspace, "w", "")
	if err != nil {
		t.Fatal(err)
	}
	defer h.release(tp)
	hold := fr.hold
	fact := []host.Fact{{WorkspaceID: "w", Kind: host.FactSessionChanged, SessionID: "s1"}}
	_ = bus.Publish(context.Background(), fact)
	<-fr.entered // the first reread is inside the store
	for range 100 {
		_ = bus.Publish(context.Background(), fact)
	}
	fr.mu.Lock()
	fr.hold = nil
	fr.mu.Unlock()
	close(hold)
	waitUntil(t, func() bool { return h.Stats().Rereads == 2 })
	time.Sleep(50 * time.Millisecond)
	if n := h.Stats().Rereads; n != 2 {
		t.Fatalf("rereads %d, want 2", n)
	}
	if n := fr.gets.Load(); n != 2 {
		t.Fatalf("store reads %d, want 2", n)
	}
	tp.mu.Lock()
	seq := tp.seq
	tp.mu.Unlock()
	if seq != 1 { // one session_summary: the second reread found nothing new
		t.Fatalf("seq %d", seq)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("condition not met")
}

func TestRingSince(t *testing.T) {
	r := ring{maxEvents: 3, maxBytes: 1 << 20}
	for i := int64(1); i <= 5; i++ {
		r.push(&event{seq: i, data: []byte("x")})
	}
	if _, ok := r.since(1, 5); ok {
		t.Fatal("seq 2 was evicted; resume from 1 must fail")
	}
	evs, ok := r.since(2, 5)
	if !ok || len(evs) != 3 || evs[0].seq != 3 {
		t.Fatalf("since 2: %v %v", ok, evs)
	}
	if evs, ok := r.since(5, 5); !ok || len(evs) != 0 {
		t.Fatal("up to date must recover with nothing")
	}
	if _, ok := r.since(6, 5); ok {
		t.Fatal("future seq must not recover")
	}
	big := ring{maxEvents: 100, maxBytes: 10}
	for i := int64(1); i <= 4; i++ {
		big.push(&event{seq: i, data: []byte("12345")})
	}
	if big.len() != 2 {
		t.Fatalf("byte cap: %d events held", big.len())
	}
	// A message's end holds two encodings (ensemble.v1 and v2): both count.
	both := ring{maxEvents: 100, maxBytes: 10}
	for i := int64(1); i <= 4; i++ {
		both.push(&event{seq: i, data: []byte("12"), v1: []byte("345")})
	}
	if both.len() != 2 {
		t.Fatalf("byte cap with two encodings: %d events held", both.len())
	}
}

func TestMessageDeltaOffsetsAreUTF16(t *testing.T) {
	h := New(Config{Reader: &fakeReader{}, Bus: NewLocalBus()})
	defer h.Close()
	tp := newTopic(h, kindSession, "w", "s", 1)
	tp.sv.msgs = map[string]*viewMsg{}
	msg := func(v int64, text string, streaming bool) host.Message {
		return host.Message{WorkspaceID: "w", SessionID: "s", ID: "m", TurnID: "t", Role: host.RoleAgent,
			Kind: host.KindText, Version: v, Ordinal: 1, Content: host.MessageContent{Text: text}, Streaming: streaming}
	}
	tp.mu.Lock()
	tp.applyMessagesLocked([]host.Message{msg(1, "héllo 👋", true)}, 1, true)
	tp.applyMessagesLocked([]host.Message{msg(2, "héllo 👋 wörld", true)}, 2, true)
	tp.applyMessagesLocked([]host.Message{msg(2, "héllo 👋 wörld", true)}, 2, true) // duplicate read: nothing
	tp.applyMessagesLocked([]host.Message{msg(3, "héllo 👋 wörld!", false)}, 3, true)
	tp.applyMessagesLocked([]host.Message{msg(4, "rewritten", false)}, 4, true)
	tp.mu.Unlock()
	type frame struct {
		Kind    string
		Seq     int64
		Payload json.RawMessage
	}
	var kinds []string
	var deltas []protocol.MessageDelta
	var closeV1 frame
	for _, ev := range tp.ring.evs[tp.ring.head:] {
		var f frame
		_ = json.Unmarshal(ev.data, &f)
		kinds = append(kinds, f.Kind)
		if f.Kind == protocol.KindMessageDelta {
			var d protocol.MessageDelta
			_ = json.Unmarshal(f.Payload, &d)
			deltas = append(deltas, d)
		}
		if ev.v1 != nil {
			_ = json.Unmarshal(ev.v1, &closeV1)
			if closeV1.Seq != f.Seq {
				t.Fatalf("v1 form at seq %d, v2 form at %d", closeV1.Seq, f.Seq)
			}
		}
	}
	if strings.Join(kinds, ",") != "message_update,message_delta,message_delta,message_update" {
		t.Fatalf("kinds %v", kinds)
	}
	// "héllo 👋" is 8 UTF-16 units (the emoji is a surrogate pair), 10 bytes.
	if d := deltas[0]; d.Offset != 8 || d.Text != " wörld" || d.Version != 2 || d.MessageID != "m" || d.Done {
		t.Fatalf("delta %+v", d)
	}
	// The end of streaming is its last words with done; an ensemble.v1
	// watcher gets the complete message at the same seq instead.
	if d := deltas[1]; d.Offset != 14 || d.Text != "!" || d.Version != 3 || !d.Done {
		t.Fatalf("closing delta %+v", d)
	}
	var u protocol.MessageUpdate
	_ = json.Unmarshal(closeV1.Payload, &u)
	if closeV1.Kind != protocol.KindMessageUpdate || u.Message.Content.Text != "héllo 👋 wörld!" || u.Message.Streaming || u.Message.Version != 3 {
		t.Fatalf("closing message for ensemble.v1: %s %+v", closeV1.Kind, u.Message)
	}
}

// wsPair returns the server side of a real WebSocket connection.
func wsPair(t testing.TB) (*websocket.Conn, *websocket.Conn) {
	t.Helper()
	ch := make(chan *websocket.Conn, 1)
	done := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		ch <- c
		<-done
	}))
	t.Cleanup(func() { close(done); ts.Close() })
	cli, _, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(ts.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := <-ch
	t.Cleanup(func() { _ = cli.CloseNow(); _ = srv.CloseNow() })
	return srv, cli
}

func TestConnQueueLatestWinsAndSlowConsumer(t *testing.T) {
	h := New(Config{Reader: &fakeReader{}, Bus: NewLocalBus(), QueueBytes: 8000})
	defer h.Close()
	srv, _ := wsPair(t)
	c, err := h.Attach(srv, "c1", nil, ConnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A writer that never finishes: everything stays queued.
	c.qmu.Lock()
	c.writing = true
	c.qmu.Unlock()
	ev := func(seq int64, key string, size int) *event {
		return &event{sub: "session:w/s", epoch: "e.1", seq: seq, key: key, data: []byte(strings.Repeat("x", size))}
	}
	c.enqueueEvent(ev(1, "k", 300))
	c.enqueueEvent(ev(2, "k", 300)) // not lagging yet: both kept
	if d := pop(c); len(d) != 300 {
		t.Fatalf("first frame superseded while not lagging")
	}
	c.enqueueEvent(ev(3, "", 1200)) // now over an eighth of the cap
	c.enqueueEvent(ev(4, "k", 300)) // supersedes seq 2
	var got []string
	for d := pop(c); d != nil; d = pop(c) {
		if strings.HasPrefix(string(d), "{") {
			got = append(got, string(d))
		} else {
			got = append(got, "data")
		}
	}
	if len(got) != 3 || !strings.Contains(got[0], `"seq":2,"kind":"superseded"`) {
		t.Fatalf("queue after supersede: %v", got)
	}
	for i := int64(5); !c.isClosing(); i++ {
		if i > 100 {
			t.Fatal("queue over its cap did not close the connection")
		}
		c.enqueueEvent(ev(i, "", 1000))
	}
	c.qmu.Lock()
	code := c.closeCode
	c.qmu.Unlock()
	if code != CloseSlowConsumer || h.Stats().SlowConsumers != 1 {
		t.Fatalf("close code %d", code)
	}
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	h := New(Config{Reader: &fakeReader{}, Bus: NewLocalBus(), Workers: 8})
	srv, cli := wsPair(t)
	c, err := h.Attach(srv, "c", nil, ConnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	runDone := make(chan struct{})
	go func() { c.Run(func([]byte) {}); close(runDone) }()
	go func() { // the client answers the close handshake
		for {
			if _, _, err := cli.Read(context.Background()); err != nil {
				return
			}
		}
	}()
	h.Close()
	select {
	case <-runDone:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after Close")
	}
	_ = cli.CloseNow()
	waitUntil(t, func() bool { return runtime.NumGoroutine() <= before+2 }) // httptest's own
}

func TestTopicsLingerThenGo(t *testing.T) {
	bus := NewLocalBus()
	h := New(Config{Reader: &fakeReader{}, Bus: bus, Linger: 100 * time.Millisecond})
	defer h.Close()
	srv, _ := wsPair(t)
	c, err := h.Attach(srv, "c", nil, ConnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	err = h.Subscribe(ctx, c, SubscribeRequest{Workspace: "w", Topic: TopicSession, SessionID: "missing"}, func(protocol.SubscribeResult) {
		t.Fatal("replied to a failed subscribe")
	})
	if host.CodeOf(err) != host.CodeNotFound {
		t.Fatalf("err %v", err)
	}
	waitUntil(t, func() bool { return h.Stats().Topics == 0 && bus.Workspaces() == 0 })

	var res protocol.SubscribeResult
	if err := h.Subscribe(ctx, c, SubscribeRequest{Workspace: "w", Topic: TopicWorkspace}, func(r protocol.SubscribeResult) { res = r }); err != nil {
		t.Fatal(err)
	}
	if res.Sub != "workspace:w" || bus.Workspaces() != 1 {
		t.Fatalf("res %+v, bus %d", res, bus.Workspaces())
	}
	if !h.Unsubscribe(c, "w", res.Sub) || h.Unsubscribe(c, "w", res.Sub) {
		t.Fatal("unsubscribe must succeed once")
	}
	time.Sleep(20 * time.Millisecond)
	if h.Stats().Topics != 1 {
		t.Fatal("topic must linger for resume")
	}
	waitUntil(t, func() bool { return h.Stats().Topics == 0 && bus.Workspaces() == 0 })
}

// pop takes the next frame as the writer would.
func pop(c *Conn) []byte {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if b := c.take(nil); len(b) > 0 {
		return b[0]
	}
	return nil
}
