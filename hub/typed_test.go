package hub

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/protocol"
)

// typedTurns drives a session's Turns in a real store and publishes each
// change as the Host does: a turn fact carrying the Turn and session as
// written.
type typedTurns struct {
	t   *testing.T
	w   *transcriptWriter
	bus *LocalBus
}

// write commits tr (inserted when insert is set) and the session as edit
// leaves it, and returns the typed fact of that commit.
func (d typedTurns) write(tr host.Turn, insert bool, edit func(*host.Session)) host.Fact {
	d.t.Helper()
	ctx := context.Background()
	var s host.Session
	err := d.w.st.Update(ctx, func(tx host.Tx) error {
		var err error
		if s, err = tx.Session(ctx, d.w.ws, d.w.sid); err != nil {
			return err
		}
		if insert {
			err = tx.InsertTurn(ctx, tr)
		} else {
			err = tx.UpdateTurn(ctx, tr)
		}
		if err != nil {
			return err
		}
		edit(&s)
		return tx.UpdateSession(ctx, s)
	})
	if err != nil {
		d.t.Fatal(err)
	}
	s.Goal = nil
	return host.Fact{WorkspaceID: d.w.ws, Kind: host.FactSessionChanged, SessionID: d.w.sid, TurnID: tr.ID, Turn: &tr, Session: &s}
}

func (d typedTurns) publish(f host.Fact) {
	d.t.Helper()
	if err := d.bus.Publish(context.Background(), []host.Fact{f}); err != nil {
		d.t.Fatal(err)
	}
}

// nextEvent reads frames until an event of kind and returns its payload.
func nextEvent[T any](t *testing.T, cl *wsClient, kind string) T {
	t.Helper()
	for {
		f, ok := cl.next(10 * time.Second)
		if !ok {
			t.Fatalf("no %s", kind)
		}
		if f.Kind == kind {
			var v T
			if err := json.Unmarshal(f.Payload, &v); err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
}

func nextTurnUpdate(t *testing.T, cl *wsClient) protocol.Turn {
	t.Helper()
	return nextEvent[protocol.TurnUpdate](t, cl, protocol.KindTurnUpdate).Turn
}

func nextSummary(t *testing.T, cl *wsClient) protocol.Session {
	t.Helper()
	return nextEvent[protocol.SessionSummary](t, cl, protocol.KindSessionSummary).Session
}

// watchWorkspace subscribes a real WebSocket connection to ws's list.
func watchWorkspace(t *testing.T, h *Hub, ws string) *wsClient {
	t.Helper()
	srv, cli := wsPair(t)
	return subscribeOn(t, h, srv, ConnOptions{}, cli, SubscribeRequest{Workspace: ws, Topic: TopicWorkspace})
}

// A turn fact that carries its committed Turn and session is applied
// without a store read: the watcher gets the Turn's new state, a Turn new to
// the window enters it (and the oldest leaves), a stale copy changes
// nothing, and a fact whose session is ahead of the transcript the topic
// shows falls back to one reread, which brings the messages first.
func TestTypedTurnFactsApplyWithoutReread(t *testing.T) {
	st := openSQLite(t)
	w := newTranscriptWriter(t, st, 11)
	bus := NewLocalBus()
	reader := host.New(host.Config{Store: st})
	h := New(Config{Reader: reader, Goals: reader, Queues: reader, Agent: reader, Bus: bus, TurnWindow: 2})
	defer h.Close()
	w.commit(t)
	cl := watch(t, h, w.ws, w.sid, nil)
	list := watchWorkspace(t, h, w.ws)
	waitQuiet(t, h)
	d := typedTurns{t: t, w: w, bus: bus}
	ctx := context.Background()
	first, err := reader.GetTurn(ctx, w.ws, w.sid, w.turn)
	if err != nil {
		t.Fatal(err)
	}
	tick := func() time.Time { w.clock = w.clock.Add(time.Millisecond); return w.clock }
	rereads := h.Stats().Rereads

	// The first Turn settles.
	settled := first
	settled.Phase, settled.Outcome, settled.UpdatedAt = host.PhaseSettled, host.OutcomeCompleted, tick()
	settled.SettledAt = &settled.UpdatedAt
	settledFact := d.write(settled, false, func(s *host.Session) { s.ActiveTurnID, s.UpdatedAt = "", w.clock })
	d.publish(settledFact)
	if got := nextTurnUpdate(t, cl); got.ID != first.ID || got.Phase != host.PhaseSettled {
		t.Fatalf("turn_update %s %s, want %s settled", got.ID, got.Phase, first.ID)
	}

	// A stale copy (as a late relay republish) is dropped, and so is an
	// unsettled copy from the settlement's own millisecond (two commits
	// within one, the older published last): a settled Turn is never shown
	// unsettled again. The next Turn is admitted; the next event is that
	// Turn.
	stale := first
	stale.Phase, stale.UpdatedAt = host.PhaseDispatched, first.UpdatedAt
	d.publish(host.Fact{WorkspaceID: w.ws, Kind: host.FactSessionChanged, SessionID: w.sid, TurnID: first.ID, Turn: &stale})
	sameMs := first
	sameMs.Phase, sameMs.UpdatedAt = host.PhaseDurablyAccepted, settled.UpdatedAt
	// Its session, from the same millisecond, still has the Turn active and
	// its transcript one version behind: the list must not show it either.
	sameMsSession := *settledFact.Session
	sameMsSession.ActiveTurnID, sameMsSession.MessageVersion = first.ID, sameMsSession.MessageVersion-1
	d.publish(host.Fact{WorkspaceID: w.ws, Kind: host.FactSessionChanged, SessionID: w.sid, TurnID: first.ID, Turn: &sameMs, Session: &sameMsSession})
	turn := func(seq int64) host.Turn {
		return host.Turn{WorkspaceID: w.ws, SessionID: w.sid, ID: host.RandomID("t"), Seq: seq, Origin: "user",
			Phase: host.PhaseQueued, CreatedAt: tick(), UpdatedAt: w.clock}
	}
	second := turn(2)
	d.publish(d.write(second, true, func(s *host.Session) { s.TurnCount, s.ActiveTurnID, s.UpdatedAt = 2, second.ID, w.clock }))
	if got := nextTurnUpdate(t, cl); got.ID != second.ID || got.Phase != host.PhaseQueued {
		t.Fatalf("turn_update %s %s, want the new Turn %s queued (the stale copy must not show)", got.ID, got.Phase, second.ID)
	}
	third := turn(3)
	d.publish(d.write(third, true, func(s *host.Session) { s.TurnCount, s.ActiveTurnID, s.UpdatedAt = 3, third.ID, w.clock }))
	if got := nextTurnUpdate(t, cl); got.ID != third.ID {
		t.Fatalf("turn_update %s, want %s", got.ID, third.ID)
	}
	// The list shows each new active Turn (the settlement changed nothing
	// it shows: the writer's session had no active Turn).
	for _, want := range []string{second.ID, third.ID} {
		if got := nextSummary(t, list); got.ActiveTurnID != want {
			t.Fatalf("workspace summary active %q, want %q", got.ActiveTurnID, want)
		}
	}
	if n := h.Stats().Rereads - rereads; n != 0 {
		t.Fatalf("%d rereads for typed turn facts, want 0", n)
	}
	// Five on the session's topic, four on the list (the first stale copy
	// carries no session).
	if n := h.Stats().TypedTurns; n != 9 {
		t.Fatalf("%d typed turn facts applied, want 9", n)
	}
	// The window is what a reread reads: the two newest Turns, more behind.
	checkWindow(t, h, reader, w)
	// A Turn older than the window is shown and not kept, as a reread does.
	older := settled
	older.StopReason, older.UpdatedAt = "end_turn", tick()
	d.publish(d.write(older, false, func(s *host.Session) {}))
	if got := nextTurnUpdate(t, cl); got.ID != first.ID || got.StopReason != "end_turn" {
		t.Fatalf("turn_update %s %q, want %s end_turn", got.ID, got.StopReason, first.ID)
	}
	checkWindow(t, h, reader, w)

	// Messages committed but not yet shown (their delta is late): the Turn
	// waits for a reread that shows them first.
	w.commit(t)
	accepted := third
	accepted.Phase, accepted.UpdatedAt = host.PhaseDurablyAccepted, tick()
	d.publish(d.write(accepted, false, func(s *host.Session) { s.UpdatedAt = w.clock }))
	if got := nextTurnUpdate(t, cl); got.ID != third.ID || got.Phase != host.PhaseDurablyAccepted {
		t.Fatalf("turn_update %s %s, want %s accepted", got.ID, got.Phase, third.ID)
	}
	if cl.pos != w.ver {
		t.Fatalf("the Turn came before the messages it follows: client at version %d, transcript at %d", cl.pos, w.ver)
	}
	if want := reread(t, st, w); cl.transcript() != want {
		t.Fatalf("watcher transcript differs from a reread\n got %s\nwant %s", cl.transcript(), want)
	}
	waitQuiet(t, h)
	if n := h.Stats().Rereads - rereads; n != 1 {
		t.Fatalf("%d rereads, want 1 (the fact ahead of the transcript)", n)
	}
	checkWindow(t, h, reader, w)
}

// checkWindow compares the session topic's Turns and session, and the
// list's summary, with a reread.
func checkWindow(t *testing.T, h *Hub, reader *host.Host, w *transcriptWriter) {
	t.Helper()
	c, err := reader.SessionChanges(context.Background(), w.ws, w.sid, host.ChangesQuery{Newest: true, Messages: 1, Turns: 2})
	if err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	tp := h.workspaces[w.ws].sessions[w.sid]
	list := h.workspaces[w.ws].ws
	h.mu.Unlock()
	type view struct {
		Turns         []protocol.Turn
		More          bool
		Session, Item protocol.Session
	}
	// The list keeps what it last showed, and a summary shows neither
	// messageVersion nor updatedAt (sameSummary).
	summary := func(s host.Session) protocol.Session {
		s.MessageVersion, s.UpdatedAt = 0, time.Time{}
		return protocol.FromSession(s)
	}
	tp.mu.Lock()
	list.mu.Lock()
	got, _ := json.Marshal(view{protocol.FromTurns(tp.sv.turns), tp.sv.turnsMore, protocol.FromSession(*tp.sv.session),
		summary(list.wv.sent[w.sid])})
	list.mu.Unlock()
	tp.mu.Unlock()
	want, _ := json.Marshal(view{protocol.FromTurns(c.Turns), c.TurnsHasMore, protocol.FromSession(c.Session), summary(c.Session)})
	if string(got) != string(want) {
		t.Fatalf("hub view differs from a reread\n got %s\nwant %s", got, want)
	}
}

// heldTree is a Reader whose interaction-tree reads wait, while hold is
// set, until the test releases them.
type heldTree struct {
	*host.Host
	hold    atomic.Bool
	held    chan struct{} // a tree read is waiting
	release chan struct{}
}

func (r *heldTree) GetSessionInteractionTreeSnapshot(ctx context.Context, ws, root string) (host.InteractionTree, error) {
	if r.hold.Load() {
		r.held <- struct{}{}
		<-r.release
	}
	return r.Host.GetSessionInteractionTreeSnapshot(ctx, ws, root)
}

// A reread of the interaction tree alone (one per admission) does not hold
// up a typed Turn: the Turn reaches the watcher while the tree read waits.
func TestTypedTurnOvertakesATreeReread(t *testing.T) {
	st := openSQLite(t)
	w := newTranscriptWriter(t, st, 12)
	bus := NewLocalBus()
	hst := host.New(host.Config{Store: st})
	reader := &heldTree{Host: hst, held: make(chan struct{}), release: make(chan struct{})}
	h := New(Config{Reader: reader, Goals: hst, Queues: hst, Agent: hst, Bus: bus})
	defer h.Close()
	w.commit(t)
	cl := watch(t, h, w.ws, w.sid, nil)
	waitQuiet(t, h)

	reader.hold.Store(true)
	var once sync.Once
	release := func() { once.Do(func() { reader.hold.Store(false); close(reader.release) }) }
	defer release() // before h.Close, which waits for the held worker
	d := typedTurns{t: t, w: w, bus: bus}
	d.publish(host.Fact{WorkspaceID: w.ws, Kind: host.FactInteractionTreeDirty, SessionID: w.sid, TurnID: w.turn})
	<-reader.held // the tree reread is in flight
	tr, err := hst.GetTurn(context.Background(), w.ws, w.sid, w.turn)
	if err != nil {
		t.Fatal(err)
	}
	w.clock = w.clock.Add(time.Millisecond)
	tr.Phase, tr.Outcome, tr.UpdatedAt, tr.SettledAt = host.PhaseSettled, host.OutcomeCompleted, w.clock, &w.clock
	d.publish(d.write(tr, false, func(s *host.Session) { s.UpdatedAt = w.clock }))
	if got := nextTurnUpdate(t, cl); got.ID != tr.ID || got.Phase != host.PhaseSettled {
		t.Fatalf("turn_update %s %s, want %s settled", got.ID, got.Phase, tr.ID)
	}
	if n := h.Stats().TypedTurns; n != 1 {
		t.Fatalf("%d typed turn facts applied, want 1", n)
	}
	release()
	waitQuiet(t, h)
}
