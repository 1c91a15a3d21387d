package hub

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// A streamed chunk reaches a watcher whose socket has room on the
// goroutine that applies its delta: the write is made before Publish
// returns, with no worker woken for it.
func TestDeltaIsWrittenOnTheApplyingGoroutine(t *testing.T) {
	w, bus, h, cl := watchedTranscript(t, false)
	for range 20 {
		// A delta of several events leaves the rest to a worker (this
		// client takes one event per frame): wait until it let go.
		cl.waitIdle()
		before := h.Stats()
		d := w.commit(t)
		if err := bus.Publish(context.Background(), []host.Fact{{WorkspaceID: w.ws, Kind: host.FactTranscriptAppended,
			SessionID: w.sid, TurnID: w.turn, Version: d.ToVersion, Delta: &d}}); err != nil {
			t.Fatal(err)
		}
		if got := h.Stats().InlineWrites - before.InlineWrites; got != 1 {
			t.Fatalf("delta to %d: %d inline writes, want 1 (the first of its events)", d.ToVersion, got)
		}
		cl.until(d.ToVersion)
	}
	want := reread(t, w.st, w)
	if got := cl.transcript(); got != want {
		t.Fatalf("watcher transcript differs from a reread\n got %s\nwant %s", got, want)
	}
}

// The facts of one commit reach a watcher that batches in one write: an
// acceptance's first chunk (its delta) and its Turn go out as one frame, as
// do the events of several facts published together.
func TestOneCommitsFactsGoInOneWrite(t *testing.T) {
	w, bus, h, cl := watchedTranscript(t, true)
	waitQuiet(t, h)
	ctx := context.Background()
	reader := host.New(host.Config{Store: w.st})
	turn, err := reader.GetTurn(ctx, w.ws, w.sid, w.turn)
	if err != nil {
		t.Fatal(err)
	}
	typed := typedTurns{t: t, w: w, bus: bus}
	for i := range 5 {
		cl.waitIdle()
		before := h.Stats()
		d := w.commit(t)
		turn.StopReason, turn.UpdatedAt = fmt.Sprint("r", i), w.clock
		tf := typed.write(turn, false, func(s *host.Session) { s.UpdatedAt = w.clock })
		facts := []host.Fact{{WorkspaceID: w.ws, Kind: host.FactTranscriptAppended, SessionID: w.sid, TurnID: w.turn,
			Version: d.ToVersion, Delta: &d}, tf}
		if err := bus.Publish(ctx, facts); err != nil {
			t.Fatal(err)
		}
		after := h.Stats()
		if got := after.TypedTurns - before.TypedTurns; got != 1 {
			t.Fatalf("round %d: %d typed turns applied, want 1", i, got)
		}
		writes, frames := after.Writes-before.Writes, after.FramesWritten-before.FramesWritten
		if writes != 1 || frames < 2 {
			t.Fatalf("round %d: the delta and the Turn took %d writes carrying %d events, want 1 write with both", i, writes, frames)
		}
		cl.until(d.ToVersion)
		if got := nextTurnUpdate(t, cl); got.StopReason != turn.StopReason {
			t.Fatalf("round %d: turn_update with stop reason %q, want %q", i, got.StopReason, turn.StopReason)
		}
	}
}

// watchedTranscript is a hub over a SQLite session with one committed
// transcript write, watched over a polled socket (batch: a version-2
// client).
func watchedTranscript(t *testing.T, batch bool) (*transcriptWriter, *LocalBus, *Hub, *wsClient) {
	st := openSQLite(t)
	w := newTranscriptWriter(t, st, 3)
	bus := NewLocalBus()
	reader := host.New(host.Config{Store: st})
	h := New(Config{Reader: reader, Goals: reader, Queues: reader, Agent: reader, Bus: bus, PingInterval: time.Hour})
	t.Cleanup(h.Close)
	w.commit(t)
	srv, opts, cli := polledServer(t)()
	opts.Batch = batch
	return w, bus, h, watchOn(t, h, srv, opts, cli, w.ws, w.sid, nil)
}

// waitIdle waits until the server side's writer let go of the socket, so
// the next emission is written on the goroutine that applies it.
func (cl *wsClient) waitIdle() {
	waitFor(cl.t, "the writer let go of the socket", func() bool {
		c := cl.server
		c.qmu.Lock()
		defer c.qmu.Unlock()
		return !c.writing
	})
}

// pushNow queues a frame and writes it as a delta's emitter does.
func pushNow(t *testing.T, c *Conn, data []byte) {
	t.Helper()
	start, ok := c.push(&outFrame{data: data})
	if !ok {
		t.Error("connection closing") // not Fatal: some callers run it on their own goroutine
		return
	}
	if start {
		c.writeNow()
	}
}

// nowWrite is a write made on the caller's goroutine when the socket
// takes it at once, and the frame it writes.
type nowWrite struct {
	name  string
	write func(*Conn)
	frame string
}

func nowWrites(t *testing.T) []nowWrite {
	return []nowWrite{
		{"ping", (*Conn).ping, string(pingFrame)},
		{"event", func(c *Conn) { pushNow(t, c, []byte(`"now"`)) }, `"now"`},
	}
}
