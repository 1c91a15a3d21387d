package hub

import (
	"bytes"
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
		t.Fatal("connection closing")
	}
	if start {
		c.writeNow()
	}
}

// On a full socket the emitter does not wait: a worker writes the rest
// under the deadline once the peer reads, in order, and what was queued
// meanwhile after it.
func TestWriteNowOnAFullSocketLeavesTheRestToAWorker(t *testing.T) {
	h := pollingHub(t, Config{PingInterval: time.Hour, WriteTimeout: 20 * time.Second})
	defer h.Close()
	srv, opts, cli := polledServer(t)()
	c, err := h.Attach(srv, "c", nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	c.Start(func([]byte) {}, nil)
	frames := fillSocket(t, opts.Wire.(*SocketWire))
	returned := make(chan struct{})
	go func() { pushNow(t, c, []byte(`"now"`)); close(returned) }()
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("the emitter waited on a full socket")
	}
	c.Send([]byte(`"after"`))
	if n := h.Stats().InlineWrites; n != 0 {
		t.Fatalf("%d inline writes on a full socket, want 0", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range frames {
		if _, b, err := cli.Read(ctx); err != nil || !bytes.Equal(b, fillPayload) {
			t.Fatalf("frame %d of %d: %q, %v", i, frames, b, err)
		}
	}
	for _, want := range []string{`"now"`, `"after"`} {
		if _, b, err := cli.Read(ctx); err != nil || string(b) != want {
			t.Fatalf("read %q, %v; want %s", b, err, want)
		}
	}
}

// While a write holds the wire (the library's control frame to a peer
// that does not read), the emitter does not wait for it either.
func TestWriteNowDoesNotWaitOnABusyWire(t *testing.T) {
	h := pollingHub(t, Config{PingInterval: time.Hour})
	defer h.Close()
	srv, opts, cli := polledServer(t)()
	c, err := h.Attach(srv, "c", nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	c.Start(func([]byte) {}, nil)
	w := opts.Wire.(*SocketWire)
	w.mu.Lock() // as a blocked write holds it
	returned := make(chan struct{})
	go func() { pushNow(t, c, []byte(`"now"`)); close(returned) }()
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("the emitter waited on a busy wire")
	}
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, b, err := cli.Read(ctx); err != nil || string(b) != `"now"` {
		t.Fatalf("read %q, %v; want the frame", b, err)
	}
}
