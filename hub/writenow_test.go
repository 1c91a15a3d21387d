package hub

import (
	"context"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// A streamed chunk reaches a watcher whose socket has room on the
// goroutine that applies its delta: the write is made before Publish
// returns, with no worker woken for it.
func TestDeltaIsWrittenOnTheApplyingGoroutine(t *testing.T) {
	st := openSQLite(t)
	w := newTranscriptWriter(t, st, 3)
	bus := NewLocalBus()
	reader := host.New(host.Config{Store: st})
	h := New(Config{Reader: reader, Goals: reader, Queues: reader, Agent: reader, Bus: bus, PingInterval: time.Hour})
	defer h.Close()
	w.commit(t)
	srv, opts, cli := polledServer(t)()
	cl := watchOn(t, h, srv, opts, cli, w.ws, w.sid, nil)
	for range 20 {
		// A delta of several events leaves the rest to a worker (this
		// client takes one event per frame): wait until it let go.
		waitFor(t, "the writer let go of the socket", func() bool {
			c := cl.server
			c.qmu.Lock()
			defer c.qmu.Unlock()
			return !c.writing
		})
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
	want := reread(t, st, w)
	if got := cl.transcript(); got != want {
		t.Fatalf("watcher transcript differs from a reread\n got %s\nwant %s", got, want)
	}
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
