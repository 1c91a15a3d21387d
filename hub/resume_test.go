package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/protocol"
)

// stream commits one streamed answer chunk by chunk to a real store and
// publishes each chunk's delta on bus.
type stream struct {
	w   *transcriptWriter
	bus *LocalBus
	id  string
}

func (s *stream) chunk(t testing.TB, text string) {
	t.Helper()
	w := s.w
	w.clock = w.clock.Add(time.Millisecond)
	ver := w.ver + 1
	m, ok := w.msgs[s.id]
	var ch host.MessageChange
	if !ok {
		m = host.Message{WorkspaceID: w.ws, SessionID: w.sid, ID: s.id, TurnID: w.turn, Role: host.RoleAgent,
			Kind: host.KindText, Ordinal: ver, Streaming: true, CreatedAt: w.clock}
		m.Content.Text = text
	} else {
		ch = host.MessageChange{ID: s.id, TurnID: w.turn, Version: ver, Offset: host.UTF16Len(m.Content.Text), Text: text, UpdatedAt: w.clock}
		m.Content.Text += text
	}
	m.Version, m.UpdatedAt = ver, w.clock
	if !ok {
		mm := m
		ch = host.MessageChange{Message: &mm}
	}
	w.put(t, m)
	w.msgs[s.id] = m
	d := host.TranscriptDelta{FromVersion: ver - 1, ToVersion: ver, At: w.clock, Messages: []host.MessageChange{ch}}
	_ = s.bus.Publish(context.Background(), []host.Fact{{WorkspaceID: w.ws, Kind: host.FactTranscriptAppended, SessionID: w.sid, Version: ver, Delta: &d}})
}

// put writes m (at the session's next version, m.Version) and moves the
// session's message version to it, in one transaction; nothing is
// published.
func (w *transcriptWriter) put(t testing.TB, m host.Message) {
	t.Helper()
	ctx := context.Background()
	if err := w.st.Update(ctx, func(tx host.Tx) error {
		sess, err := tx.Session(ctx, w.ws, w.sid)
		if err != nil {
			return err
		}
		if err := tx.PutMessage(ctx, m); err != nil {
			return err
		}
		sess.MessageVersion, sess.UpdatedAt = m.Version, w.clock
		return tx.UpdateSession(ctx, sess)
	}); err != nil {
		t.Fatal(err)
	}
	w.ver = m.Version
}

// drain applies frames until the client's position reaches ver and returns
// the message_delta texts it saw.
func (cl *wsClient) drain(ver int64) string {
	cl.t.Helper()
	var b strings.Builder
	for cl.pos < ver {
		f, ok := cl.next(10 * time.Second)
		if !ok {
			cl.t.Fatalf("client stuck at position %d, want %d", cl.pos, ver)
		}
		if f.Kind == protocol.KindMessageDelta {
			var d protocol.MessageDelta
			_ = json.Unmarshal(f.Payload, &d)
			b.WriteString(d.Text)
		}
	}
	return b.String()
}

func subscribeErr(t *testing.T, h *Hub, req SubscribeRequest) (protocol.SubscribeResult, error) {
	t.Helper()
	srv, _ := wsPair(t)
	c, err := h.Attach(srv, host.RandomID("c"), nil, ConnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var res protocol.SubscribeResult
	err = h.Subscribe(context.Background(), c, req, func(r protocol.SubscribeResult) { res = r })
	return res, err
}

// replicaHubs opens a store with one session (a transcript writer on it),
// a bus and n hubs over them: n replicas. The hubs close with the test.
func replicaHubs(t *testing.T, n int, seed uint64) (host.Store, *transcriptWriter, *LocalBus, []*Hub) {
	t.Helper()
	st := openSQLite(t)
	w := newTranscriptWriter(t, st, seed)
	bus := NewLocalBus()
	reader := host.New(host.Config{Store: st})
	hubs := make([]*Hub, n)
	for i := range hubs {
		hubs[i] = New(Config{Reader: reader, Goals: reader, Queues: reader, Agent: reader, Bus: bus, Workers: 2})
		t.Cleanup(hubs[i].Close)
	}
	return st, w, bus, hubs
}

// TestResumeFromPositionOnAnotherHub: two hubs on one store and one bus are
// two replicas. A watcher leaves hub A mid-answer and resumes from its
// position on hub B: from B's ring (B has a watcher) it gets recovered:true
// and exactly the missing suffix as deltas; on hub C, which has no topic
// yet, it gets recovered:true with the changed message complete.
func TestResumeFromPositionOnAnotherHub(t *testing.T) {
	_, w, bus, hubs := replicaHubs(t, 3, 1)
	s := &stream{w: w, bus: bus, id: "answer"}
	s.chunk(t, "Once ")
	a := watch(t, hubs[0], w.ws, w.sid, nil)
	other := watch(t, hubs[1], w.ws, w.sid, nil) // keeps B's topic live
	var sent strings.Builder
	for i := range 10 {
		c := fmt.Sprintf("chunk%d 👋 ", i)
		sent.WriteString(c)
		s.chunk(t, c)
	}
	a.drain(w.ver)
	pos := protocol.Position{Epoch: hubs[0].streamEpochFor(t, w.ws, w.sid), Version: a.pos}
	seen := a.msgs["answer"].Content.Text
	_ = a.c.CloseNow() // leaves mid-answer
	var missing strings.Builder
	for i := range 10 {
		c := fmt.Sprintf("more%d 𝄞 ", i)
		missing.WriteString(c)
		s.chunk(t, c)
	}
	other.drain(w.ver)

	b := watch(t, hubs[1], w.ws, w.sid, &pos)
	if !b.recovered {
		t.Fatal("resume on hub B: recovered = false")
	}
	b.msgs = map[string]protocol.Message{"answer": {ID: "answer", Version: pos.Version, Content: protocol.MessageContent{Text: seen}}}
	if got := b.drain(w.ver); got != missing.String() {
		t.Fatalf("hub B replayed %q, want exactly the missing suffix %q", got, missing.String())
	}
	if got, want := b.msgs["answer"].Content.Text, w.msgs["answer"].Content.Text; got != want {
		t.Fatalf("after resume: %q, want %q", got, want)
	}

	c := watch(t, hubs[2], w.ws, w.sid, &pos)
	if !c.recovered {
		t.Fatal("resume on hub C (no topic): recovered = false")
	}
	if got, want := c.msgs["answer"].Content.Text, w.msgs["answer"].Content.Text; got != want {
		t.Fatalf("hub C changes: %q, want %q", got, want)
	}
	if c.pos != w.ver {
		t.Fatalf("hub C position %d, want %d", c.pos, w.ver)
	}
}

// TestResumePositionOldForeignBad: a position of another history or one too
// old gives a snapshot; a malformed one, one ahead of the session, or one
// on a workspace topic is invalid input.
func TestResumePositionOldForeignBad(t *testing.T) {
	st := openSQLite(t)
	w := newTranscriptWriter(t, st, 2)
	bus := NewLocalBus()
	reader := host.New(host.Config{Store: st})
	h := New(Config{Reader: reader, Goals: reader, Queues: reader, Agent: reader, Bus: bus, Workers: 2, MessageWindow: 2, CatchUpMessages: 4})
	defer h.Close()
	for i := range 5 {
		(&stream{w: w, bus: bus, id: fmt.Sprint("m", i)}).chunk(t, "x")
	}
	epoch := h.streamEpochFor(t, w.ws, w.sid)
	req := func(p protocol.Position) SubscribeRequest {
		return SubscribeRequest{Workspace: w.ws, Topic: TopicSession, SessionID: w.sid, Position: &p}
	}

	res, err := subscribeErr(t, h, req(protocol.Position{Epoch: "h1.other", Version: 3}))
	if err != nil || res.Recovered || res.Snapshot == nil {
		t.Fatalf("foreign epoch: recovered=%v err=%v", res.Recovered, err)
	}
	// Below the 2-message window: read from the store.
	res, err = subscribeErr(t, h, req(protocol.Position{Epoch: epoch, Version: 1}))
	if err != nil || !res.Recovered || len(res.Changes.Messages) != 4 {
		t.Fatalf("old position within the catch-up bound: recovered=%v err=%v", res.Recovered, err)
	}
	// Older than the window and the catch-up bound: a snapshot.
	res, err = subscribeErr(t, h, req(protocol.Position{Epoch: epoch, Version: 0}))
	if err != nil || res.Recovered || res.Snapshot == nil {
		t.Fatalf("too old: recovered=%v err=%v", res.Recovered, err)
	}
	for _, bad := range []protocol.Position{{Epoch: "", Version: 1}, {Epoch: epoch, Version: -1}, {Epoch: strings.Repeat("e", 65)}, {Epoch: epoch, Version: 99}} {
		if _, err := subscribeErr(t, h, req(bad)); host.CodeOf(err) != host.CodeInvalidInput {
			t.Fatalf("position %+v: err %v, want invalid_input", bad, err)
		}
	}
	_, err = subscribeErr(t, h, SubscribeRequest{Workspace: w.ws, Topic: TopicWorkspace, Position: &protocol.Position{Epoch: epoch}})
	if host.CodeOf(err) != host.CodeInvalidInput {
		t.Fatalf("position on a workspace topic: %v", err)
	}
}

// streamEpochFor reads a session's stream epoch through a fresh subscribe.
func (h *Hub) streamEpochFor(t *testing.T, ws, sid string) string {
	t.Helper()
	res, err := subscribeErr(t, h, SubscribeRequest{Workspace: ws, Topic: TopicSession, SessionID: sid})
	if err != nil || res.Position == nil {
		t.Fatalf("subscribe: %v, position %v", err, res.Position)
	}
	return res.Position.Epoch
}

// TestRingPositions: after(ver) replays what follows the event that left
// the stream at ver, and refuses positions it cannot place; verAt maps a
// seq to the position it stands at.
func TestRingPositions(t *testing.T) {
	r := ring{maxEvents: 5, maxBytes: 1 << 20}
	// seq:ver — turn events (ver 0) between message events.
	for i, ver := range []int64{3, 0, 4, 0, 0, 7, 9} {
		r.push(&event{seq: int64(i + 1), ver: ver, data: []byte("x")})
	}
	// Held: seq 3(ver 4) 4 5 6(ver 7) 7(ver 9).
	evs, seq, ok := r.after(4)
	if !ok || seq != 3 || len(evs) != 4 || evs[0].seq != 4 {
		t.Fatalf("after 4: ok=%v seq=%d %d events", ok, seq, len(evs))
	}
	if evs, _, ok := r.after(9); !ok || len(evs) != 0 {
		t.Fatal("at the head: recovered with nothing")
	}
	for _, v := range []int64{3, 5, 8, 10, 0, -1} { // evicted, never a position, or unknown
		if _, _, ok := r.after(v); ok {
			t.Fatalf("after %d must not be placed", v)
		}
	}
	if v := r.verAt(5); v != 4 {
		t.Fatalf("verAt(5) = %d, want 4", v)
	}
	if v := r.verAt(2); v != 0 {
		t.Fatalf("verAt(2) = %d, want 0 (evicted)", v)
	}
}

// TestResumeFromPositionCarriesTheTree: what changed beside the transcript
// while a watcher was away (here an approval the agent asked for) comes
// with a recovery from its position on another hub, in `changes`, as the
// current state; events only say what changes after the resume.
func TestResumeFromPositionCarriesTheTree(t *testing.T) {
	st, w, bus, hubs := replicaHubs(t, 2, 2)
	a, c := hubs[0], hubs[1]
	s := &stream{w: w, bus: bus, id: "answer"}
	s.chunk(t, "Let me run ")
	cl := watch(t, a, w.ws, w.sid, nil)
	s.chunk(t, "the tests.")
	cl.drain(w.ver)
	pos := protocol.Position{Epoch: a.streamEpochFor(t, w.ws, w.sid), Version: cl.pos}
	_ = cl.c.CloseNow()

	// Away: the agent asks for an approval; no message version moves.
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	if err := st.Update(ctx, func(tx host.Tx) error {
		return tx.InsertInteraction(ctx, host.Interaction{WorkspaceID: w.ws, SessionID: w.sid, TurnID: w.turn,
			RequestID: "req-away", RootSessionID: w.sid, Kind: host.InteractionApproval, Title: "run the tests?",
			State: host.InteractionPending, CreatedAt: now, UpdatedAt: now})
	}); err != nil {
		t.Fatal(err)
	}
	_ = bus.Publish(ctx, []host.Fact{{WorkspaceID: w.ws, Kind: host.FactInteractionTreeDirty, SessionID: w.sid, TurnID: w.turn}})

	res, err := subscribeErr(t, c, SubscribeRequest{Workspace: w.ws, Topic: TopicSession, SessionID: w.sid, Position: &pos})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Recovered || res.Changes == nil {
		t.Fatalf("resume on hub C: %+v, want recovered with changes", res)
	}
	tree := res.Changes.InteractionTree
	if tree == nil || len(tree.Interactions) != 1 || tree.Interactions[0].RequestID != "req-away" {
		t.Fatalf("changes.interactionTree = %+v, want the approval asked while away", tree)
	}
	if p := res.Changes.Presence; p == nil || p.SessionID != w.sid {
		t.Fatalf("changes.presence = %+v, want the session's", p)
	}
}

// TestResumeAheadOfALaggingReplica: a position this replica's view has not
// reached, more than one store read behind (its bus lagged), is caught up
// page by page and recovered; it is not "ahead of the session".
func TestResumeAheadOfALaggingReplica(t *testing.T) {
	_, w, bus, hubs := replicaHubs(t, 1, 3)
	c := hubs[0]
	s := &stream{w: w, bus: bus, id: "first"}
	s.chunk(t, "hello")
	keep := watch(t, c, w.ws, w.sid, nil) // the topic stays loaded at this version
	keep.drain(w.ver)
	// msgPage and more new messages committed that this replica's bus
	// never delivered.
	for i := range msgPage + 100 {
		w.clock = w.clock.Add(time.Millisecond)
		ver := w.ver + 1
		m := host.Message{WorkspaceID: w.ws, SessionID: w.sid, ID: fmt.Sprintf("m%d", i), TurnID: w.turn, Role: host.RoleAgent,
			Kind: host.KindText, Version: ver, Ordinal: ver, CreatedAt: w.clock, UpdatedAt: w.clock}
		m.Content.Text = "word"
		w.put(t, m)
	}
	pos := protocol.Position{Epoch: c.streamEpochFor(t, w.ws, w.sid), Version: w.ver}
	res, err := subscribeErr(t, c, SubscribeRequest{Workspace: w.ws, Topic: TopicSession, SessionID: w.sid, Position: &pos})
	if err != nil {
		t.Fatalf("resume at the store's head on a lagging replica: %v", err)
	}
	if !res.Recovered || res.Position == nil || res.Position.Version != w.ver {
		t.Fatalf("resume: recovered %v at %+v, want recovered at %d", res.Recovered, res.Position, w.ver)
	}
	past := protocol.Position{Epoch: pos.Epoch, Version: w.ver + 1}
	if _, err := subscribeErr(t, c, SubscribeRequest{Workspace: w.ws, Topic: TopicSession, SessionID: w.sid, Position: &past}); host.CodeOf(err) != host.CodeInvalidInput {
		t.Fatalf("a position past the store's head: %v, want invalid_input", err)
	}
}
