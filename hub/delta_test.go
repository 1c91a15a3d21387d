package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/coder/websocket"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/protocol"
	"github.com/ensemble-dev/ensemble/sqlite"
)

// transcriptWriter commits random transcript changes to a real store and
// builds each commit's TranscriptDelta from the values it wrote, as the
// committing transaction does.
type transcriptWriter struct {
	st            host.Store
	ws, sid, turn string
	ver           int64
	msgs          map[string]host.Message
	order         []string
	rng           *rand.Rand
	clock         time.Time
}

func newTranscriptWriter(t testing.TB, st host.Store, seed uint64) *transcriptWriter {
	t.Helper()
	w := &transcriptWriter{st: st, ws: host.RandomID("ws"), sid: host.RandomID("s"), turn: host.RandomID("t"),
		msgs: map[string]host.Message{}, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b9)),
		clock: time.UnixMilli(1_760_000_000_000).UTC()}
	err := st.Update(context.Background(), func(tx host.Tx) error {
		s := host.Session{WorkspaceID: w.ws, ID: w.sid, RootID: w.sid, Title: "differential", Agent: "sim",
			CreatedAt: w.clock, UpdatedAt: w.clock}
		if err := tx.InsertSession(context.Background(), s); err != nil {
			return err
		}
		return tx.InsertTurn(context.Background(), host.Turn{WorkspaceID: w.ws, SessionID: w.sid, ID: w.turn, Seq: 1,
			Origin: "user", Phase: host.PhaseDurablyAccepted, CreatedAt: w.clock, UpdatedAt: w.clock})
	})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// pieces mixes ASCII, two-byte, three-byte and surrogate-pair characters,
// so UTF-16 offsets and byte offsets differ.
var pieces = []string{"a", "word ", "é", "👋", "𝄞", "中文", "\n", "x", "🎉🎉"}

func (w *transcriptWriter) text() string {
	s := ""
	for range 1 + w.rng.IntN(4) {
		s += pieces[w.rng.IntN(len(pieces))]
	}
	return s
}

// commit writes one transaction touching 1–3 messages and returns its delta.
func (w *transcriptWriter) commit(t testing.TB) host.TranscriptDelta {
	t.Helper()
	ctx := context.Background()
	w.clock = w.clock.Add(time.Millisecond)
	d := host.TranscriptDelta{FromVersion: w.ver, At: w.clock}
	touched := map[string]bool{}
	next := map[string]host.Message{}
	ver := w.ver
	for range 1 + w.rng.IntN(3) {
		var live []string
		for _, id := range w.order {
			if w.msgs[id].Streaming && !touched[id] {
				live = append(live, id)
			}
		}
		ver++
		if len(live) == 0 || w.rng.IntN(5) == 0 {
			m := host.Message{WorkspaceID: w.ws, SessionID: w.sid, ID: fmt.Sprintf("m%d", ver), TurnID: w.turn,
				Role: host.RoleAgent, Kind: host.KindText, Version: ver, Ordinal: ver, Streaming: true,
				Content: host.MessageContent{Text: w.text()}, CreatedAt: w.clock, UpdatedAt: w.clock}
			if w.rng.IntN(3) == 0 {
				m.Kind, m.Content.Text = host.KindToolCall, ""
				m.Tool = &host.ToolCall{ID: "tc" + m.ID, Title: "read", Kind: "read", Status: "pending", Input: json.RawMessage(`{"path":"a.go"}`)}
			}
			touched[m.ID], next[m.ID] = true, m
			w.order = append(w.order, m.ID)
			d.Messages = append(d.Messages, host.MessageChange{Message: &m})
			continue
		}
		id := live[w.rng.IntN(len(live))]
		m := w.msgs[id]
		ch := host.MessageChange{ID: id, TurnID: m.TurnID, Version: ver, Offset: len(utf16.Encode([]rune(m.Content.Text))), UpdatedAt: w.clock}
		switch r := w.rng.IntN(10); {
		case m.Kind == host.KindToolCall:
			tool := *m.Tool
			tool.Status, tool.Output = "in_progress", tool.Output+w.text()
			if r < 3 {
				tool.Status = "completed"
				m.Streaming, ch.Done = false, true
			}
			m.Tool, ch.Tool = &tool, &tool
		case r == 0: // a change that is not an append: the whole message
			m.Content.DisplayText = "edited"
			m.Streaming = false
		default:
			ch.Text = w.text()
			m.Content.Text += ch.Text
			if r < 3 {
				m.Streaming, ch.Done = false, true
			}
		}
		m.Version, m.UpdatedAt = ver, w.clock
		touched[id], next[id] = true, m
		if m.Content.DisplayText == "edited" && ch.Text == "" && ch.Tool == nil && !ch.Done {
			mm := m
			ch = host.MessageChange{Message: &mm}
		}
		d.Messages = append(d.Messages, ch)
	}
	err := w.st.Update(ctx, func(tx host.Tx) error {
		s, err := tx.Session(ctx, w.ws, w.sid)
		if err != nil {
			return err
		}
		for _, m := range next {
			if err := tx.PutMessage(ctx, m); err != nil {
				return err
			}
		}
		s.MessageVersion, s.UpdatedAt = ver, w.clock
		return tx.UpdateSession(ctx, s)
	})
	if err != nil {
		t.Fatal(err)
	}
	for id, m := range next {
		w.msgs[id] = m
	}
	w.ver, d.ToVersion = ver, ver
	return d
}

// wsClient is a watcher on a real WebSocket: it applies what it receives the
// way the protocol tells a client to.
type wsClient struct {
	t         testing.TB
	c         *websocket.Conn
	msgs      map[string]protocol.Message
	pos       int64
	recovered bool
	frames    chan []byte
	server    *Conn // the hub's side, when watchOn attached it
	dones     int   // message_delta events that ended a message (ensemble.v2)
}

type clientFrame struct {
	Type     string          `json:"type"`
	Seq      int64           `json:"seq"`
	Kind     string          `json:"kind"`
	Version  int64           `json:"version"`
	Payload  json.RawMessage `json:"payload"`
	Result   *resultFrame    `json:"result"`
	Snapshot json.RawMessage `json:"snapshot"`
}

type resultFrame struct {
	protocol.SubscribeResult
	Snapshot *protocol.SessionSnapshot `json:"snapshot"`
}

func newWSClient(t testing.TB, c *websocket.Conn) *wsClient {
	c.SetReadLimit(-1) // snapshots are larger than the default 32 KiB
	cl := &wsClient{t: t, c: c, msgs: map[string]protocol.Message{}, frames: make(chan []byte, 4096)}
	go func() {
		defer close(cl.frames)
		for {
			_, data, err := c.Read(context.Background())
			if err != nil {
				return
			}
			if len(data) > 0 && data[0] == '[' { // several events (a client that batches)
				var evs []json.RawMessage
				if err := json.Unmarshal(data, &evs); err != nil {
					t.Errorf("decode batch %s: %v", data, err)
					return
				}
				for _, ev := range evs {
					cl.frames <- ev
				}
				continue
			}
			cl.frames <- data
		}
	}()
	return cl
}

// next applies one frame; it returns the frame.
func (cl *wsClient) next(timeout time.Duration) (clientFrame, bool) {
	select {
	case data, ok := <-cl.frames:
		if !ok {
			return clientFrame{}, false
		}
		var f clientFrame
		if err := json.Unmarshal(data, &f); err != nil {
			cl.t.Fatalf("decode %s: %v", data, err)
		}
		cl.apply(f)
		return f, true
	case <-time.After(timeout):
		return clientFrame{}, false
	}
}

func (cl *wsClient) apply(f clientFrame) {
	if f.Result != nil {
		cl.recovered = f.Result.Recovered
		if snap := f.Result.Snapshot; snap != nil {
			cl.msgs = map[string]protocol.Message{}
			for _, m := range snap.Messages {
				cl.msgs[m.ID] = m
			}
		}
		if ch := f.Result.Changes; ch != nil {
			for _, m := range ch.Messages {
				cl.put(m)
			}
		}
		if p := f.Result.Position; p != nil {
			cl.pos = p.Version
		}
		return
	}
	switch f.Kind {
	case protocol.KindMessageUpdate:
		var u protocol.MessageUpdate
		_ = json.Unmarshal(f.Payload, &u)
		cl.put(u.Message)
	case protocol.KindMessageDelta:
		var d protocol.MessageDelta
		_ = json.Unmarshal(f.Payload, &d)
		m, ok := cl.msgs[d.MessageID]
		if !ok {
			cl.t.Fatalf("delta for unknown message %s", d.MessageID)
		}
		if m.Version >= d.Version {
			return
		}
		u := utf16.Encode([]rune(m.Content.Text))
		if d.Offset > len(u) {
			cl.t.Fatalf("delta offset %d past the text (%d units) of %s", d.Offset, len(u), d.MessageID)
		}
		m.Content.Text = string(utf16.Decode(u[:d.Offset])) + d.Text
		m.Version, m.UpdatedAt = d.Version, d.UpdatedAt
		if d.Done {
			m.Streaming = false
			cl.dones++
		}
		cl.msgs[d.MessageID] = m
	}
	if f.Version > cl.pos {
		cl.pos = f.Version
	}
}

func (cl *wsClient) put(m protocol.Message) {
	if old, ok := cl.msgs[m.ID]; !ok || old.Version < m.Version {
		cl.msgs[m.ID] = m
	}
}

// transcript is the client's messages encoded ascending by version.
func (cl *wsClient) transcript() string {
	ms := make([]protocol.Message, 0, len(cl.msgs))
	for _, m := range cl.msgs {
		ms = append(ms, m)
	}
	return encodeMessages(ms)
}

func encodeMessages(ms []protocol.Message) string {
	ms = slices.Clone(ms)
	slices.SortFunc(ms, func(a, b protocol.Message) int { return int(a.Version - b.Version) })
	b, _ := json.Marshal(ms)
	return string(b)
}

// watch attaches a real WebSocket connection to h and subscribes it.
func watch(t testing.TB, h *Hub, ws, sid string, pos *protocol.Position) *wsClient {
	t.Helper()
	srv, cli := wsPair(t)
	return watchOn(t, h, srv, ConnOptions{}, cli, ws, sid, pos)
}

// watchOn is watch over a given connection pair.
func watchOn(t testing.TB, h *Hub, srv *websocket.Conn, opts ConnOptions, cli *websocket.Conn, ws, sid string, pos *protocol.Position) *wsClient {
	t.Helper()
	return subscribeOn(t, h, srv, opts, cli, SubscribeRequest{Workspace: ws, Topic: TopicSession, SessionID: sid, Position: pos})
}

// subscribeOn attaches the server side of a connection pair to h and
// subscribes it with req.
func subscribeOn(t testing.TB, h *Hub, srv *websocket.Conn, opts ConnOptions, cli *websocket.Conn, req SubscribeRequest) *wsClient {
	t.Helper()
	c, err := h.Attach(srv, host.RandomID("c"), nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	c.Start(func([]byte) {}, nil)
	cl := newWSClient(t, cli)
	cl.server = c
	err = h.Subscribe(context.Background(), c, req,
		func(res protocol.SubscribeResult) { c.SendJSON(map[string]any{"type": "response", "result": res}) })
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	if f, ok := cl.next(5 * time.Second); !ok || f.Result == nil {
		t.Fatalf("no subscribe result: %+v %v", f, ok)
	}
	return cl
}

// until applies frames until the client's position reaches ver.
func (cl *wsClient) until(ver int64) {
	cl.t.Helper()
	for cl.pos < ver {
		if _, ok := cl.next(10 * time.Second); !ok {
			cl.t.Fatalf("client stuck at position %d, want %d", cl.pos, ver)
		}
	}
}

func openSQLite(t testing.TB) host.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "hub.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func reread(t testing.TB, st host.Store, w *transcriptWriter) string {
	t.Helper()
	p, err := st.ListMessages(context.Background(), w.ws, w.sid, host.MessageQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return encodeMessages(protocol.FromMessages(p.Messages))
}

// TestDeltaApplyMatchesReread is the differential test: over random commits
// (several messages, tool updates, done flags, whole-message changes,
// surrogate pairs) delivered with losses, duplicates, reorderings and
// untyped facts, a watcher that applies what the hub emits to its snapshot
// holds exactly the bytes a reread of the store gives, and so does the
// hub's own view.
func TestDeltaApplyMatchesReread(t *testing.T) {
	st := openSQLite(t)
	for seed := range uint64(6) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			w := newTranscriptWriter(t, st, seed)
			bus := NewLocalBus()
			reader := host.New(host.Config{Store: st})
			h := New(Config{Reader: reader, Goals: reader, Queues: reader, Agent: reader, Bus: bus, Workers: 2})
			defer h.Close()
			w.commit(t) // something before the snapshot
			cl := watch(t, h, w.ws, w.sid, nil)
			srv, cli := wsPair(t)
			cl2 := watchOn(t, h, srv, ConnOptions{Batch: true}, cli, w.ws, w.sid, nil) // ensemble.v2: done deltas
			rng := rand.New(rand.NewPCG(seed, 7))
			var held *host.Fact
			publish := func(f host.Fact) { _ = bus.Publish(context.Background(), []host.Fact{f}) }
			for range 300 {
				d := w.commit(t)
				f := host.Fact{WorkspaceID: w.ws, Kind: host.FactTranscriptAppended, SessionID: w.sid, TurnID: w.turn, Version: d.ToVersion, Delta: &d}
				switch r := rng.IntN(20); {
				case r == 0: // lost: the next delta is a gap
				case r == 1:
					publish(f)
					// Once the watchers have it the view is past it, so the
					// second is a duplicate however slow the rereads run.
					cl.until(d.ToVersion)
					cl2.until(d.ToVersion)
					publish(f) // duplicate
				case r == 2:
					publish(host.Fact{WorkspaceID: w.ws, Kind: host.FactTranscriptAdvanced, SessionID: w.sid, Version: d.ToVersion})
				case r == 3 && held == nil: // reordered after the next one
					held = &f
					continue
				default:
					publish(f)
				}
				if held != nil {
					publish(*held)
					held = nil
				}
			}
			// The relay's eventual republish: an untyped fact rereads whatever
			// a lost last delta left out.
			publish(host.Fact{WorkspaceID: w.ws, Kind: host.FactTranscriptAdvanced, SessionID: w.sid})
			cl.until(w.ver)
			cl2.until(w.ver)
			want := reread(t, st, w)
			if got := cl.transcript(); got != want {
				t.Fatalf("watcher transcript differs from a reread\n got %s\nwant %s", got, want)
			}
			if got := cl2.transcript(); got != want {
				t.Fatalf("ensemble.v2 watcher transcript differs from a reread\n got %s\nwant %s", got, want)
			}
			if cl2.dones == 0 || cl.dones != 0 {
				t.Fatalf("done deltas: %d to the ensemble.v2 watcher (want some), %d to the ensemble.v1 one (want none)", cl2.dones, cl.dones)
			}
			fresh := watch(t, h, w.ws, w.sid, nil)
			if got := fresh.transcript(); got != want {
				t.Fatalf("hub view differs from a reread\n got %s\nwant %s", got, want)
			}
			s := h.Stats()
			if s.DeltasApplied == 0 || s.DeltaDuplicates == 0 || s.DeltaGapRereads == 0 {
				t.Fatalf("faults not exercised: %+v", s)
			}
		})
	}
}
