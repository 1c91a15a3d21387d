package hub

import (
	"bytes"
	"context"
	"net"

	"github.com/coder/websocket"
	"testing"
	"time"
)

// A raw TCP pair: the server side's wire, and the client socket.
func tcpWire(t *testing.T) (*SocketWire, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cli, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close(); _ = srv.Close() })
	return NewSocketWire(srv), cli
}

// TryEnd on a socket that takes nothing more leaves the rest pending;
// writes after it (the library's own control frames) queue behind it, and
// End delivers everything in order once the peer reads.
func TestSocketWireTryEndKeepsTheRestInOrder(t *testing.T) {
	w, cli := tcpWire(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<20) // 16 MiB: more than loopback's buffers
	w.Begin()
	if _, err := w.Write(big); err != nil {
		t.Fatal(err)
	}
	pending, err := w.TryEnd()
	if err != nil || !pending {
		t.Fatalf("TryEnd on a full socket: pending %v, err %v", pending, err)
	}
	if _, err := w.Write([]byte("tail")); err != nil { // passes nothing to the socket yet
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	go func() {
		b := make([]byte, 0, len(big)+4)
		buf := make([]byte, 64<<10)
		for len(b) < len(big)+4 {
			n, err := cli.Read(buf)
			if err != nil {
				break
			}
			b = append(b, buf[:n]...)
		}
		got <- b
	}()
	if err := w.End(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if b := <-got; !bytes.Equal(b, append(big, "tail"...)) {
		t.Fatalf("peer read %d bytes, not the %d written in order", len(b), len(big)+4)
	}

	// With room, TryEnd writes all at once and leaves nothing.
	w.Begin()
	_, _ = w.Write([]byte("small"))
	if pending, err := w.TryEnd(); pending || err != nil {
		t.Fatalf("TryEnd with room: pending %v, err %v", pending, err)
	}
	b := make([]byte, 5)
	_ = cli.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := cli.Read(b); err != nil || string(b) != "small" {
		t.Fatalf("read %q, %v", b, err)
	}
}

// fillPayload is what each of fillSocket's frames carries.
var fillPayload = bytes.Repeat([]byte("x"), 125)

// fillSocket writes whole text frames of fillPayload straight to the socket
// until it takes no more; a frame it took in part is left pending in the
// wire, as TryEnd leaves it. It returns how many frames it wrote.
func fillSocket(t *testing.T, w *SocketWire) int {
	t.Helper()
	frame := append([]byte{0x81, 125}, fillPayload...)
	chunk := bytes.Repeat(frame, 512)
	frames := 0
	for {
		n, err := w.tryWrite(chunk)
		if err != nil {
			t.Fatal(err)
		}
		frames += len(chunk) / len(frame)
		if n < len(chunk) {
			w.buf = getBuf()
			*w.buf = append(*w.buf, chunk[n:]...)
			return frames
		}
	}
}

// writeOnFullSocket starts a polled connection (pings by hand), fills its
// socket with frames, and makes write; frames is how many came before it.
func writeOnFullSocket(t *testing.T, writeTimeout time.Duration, write func(*Conn)) (h *Hub, c *Conn, cli *websocket.Conn, frames int) {
	t.Helper()
	h = pollingHub(t, Config{PingInterval: time.Hour, WriteTimeout: writeTimeout})
	t.Cleanup(h.Close)
	var opts ConnOptions
	c, opts, cli = attachPolled(t, h)
	frames = fillSocket(t, opts.Wire.(*SocketWire))
	write(c)
	return h, c, cli, frames
}

// attachPolled attaches and starts a polled connection.
func attachPolled(t *testing.T, h *Hub) (*Conn, ConnOptions, *websocket.Conn) {
	t.Helper()
	srv, opts, cli := polledServer(t)()
	c, err := h.Attach(srv, "c", nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	c.Start(func([]byte) {}, nil)
	return c, opts, cli
}

// The heartbeat's ping and a delta's events are written on the caller's
// goroutine only when the socket takes them at once. On a full socket
// the rest goes to a worker that waits under the write deadline: the
// frame arrives after everything before it once the peer reads, and
// frames queued meanwhile after it.
func TestWriteNowOnAFullSocketWaitsForThePeer(t *testing.T) {
	for _, nw := range nowWrites(t) {
		t.Run(nw.name, func(t *testing.T) {
			h, c, cli, frames := writeOnFullSocket(t, 20*time.Second, nw.write)
			c.Send([]byte(`"after"`))
			if n := h.Stats().InlineWrites; n != 0 {
				t.Fatalf("%d inline writes on a full socket, want 0", n)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for i := range frames {
				_, b, err := cli.Read(ctx)
				if err != nil || !bytes.Equal(b, fillPayload) {
					t.Fatalf("frame %d of %d: %q, %v", i, frames, b, err)
				}
			}
			for _, want := range []string{nw.frame, `"after"`} {
				if _, b, err := cli.Read(ctx); err != nil || string(b) != want {
					t.Fatalf("read %q, %v; want %s", b, err, want)
				}
			}
		})
	}
}

// A peer that stops reading is still found out through the heartbeat's
// ping: the write it could not take times out, and the connection is
// closed as a slow consumer.
func TestPingToAPeerThatNeverReadsIsASlowConsumer(t *testing.T) {
	h, c, _, _ := writeOnFullSocket(t, 200*time.Millisecond, (*Conn).ping)
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a peer that never reads was not closed")
	}
	if n := h.Stats().SlowConsumers; n != 1 {
		t.Fatalf("%d slow consumers, want 1", n)
	}
}

// Expiries come from one heap, soonest first: an expiry that passed closes
// its connection with 4010; a refreshed or cleared one does not; a
// detached connection leaves the heap and its slot's list.
func TestExpiriesCloseOnlyWhatExpired(t *testing.T) {
	h := New(Config{Reader: &fakeReader{}, Bus: NewLocalBus(), PingInterval: time.Hour / 10})
	defer h.Close()
	now := time.Now()
	type tc struct {
		name    string
		set     []time.Time
		expired bool
	}
	cases := []tc{
		{"passes", []time.Time{now.Add(50 * time.Millisecond)}, true},
		{"refreshed", []time.Time{now.Add(50 * time.Millisecond), now.Add(time.Hour)}, false},
		{"cleared", []time.Time{now.Add(50 * time.Millisecond), {}}, false},
		{"later", []time.Time{now.Add(time.Hour), now.Add(150 * time.Millisecond)}, true},
		{"none", nil, false},
	}
	closed := make([]chan websocket.StatusCode, len(cases))
	for i, x := range cases {
		srv, cli := wsPair(t)
		c, err := h.Attach(srv, x.name, nil, ConnOptions{})
		if err != nil {
			t.Fatal(err)
		}
		go c.Run(func([]byte) {})
		for _, at := range x.set {
			c.SetExpiry(at)
		}
		closed[i] = make(chan websocket.StatusCode, 1)
		go func() {
			for {
				if _, _, err := cli.Read(context.Background()); err != nil {
					closed[i] <- websocket.CloseStatus(err)
					return
				}
			}
		}()
	}
	// The ticker of a 6-minute interval does not tick here: drive expiries
	// as a tick would.
	deadline := time.Now().Add(10 * time.Second)
	heapLen := func() int {
		h.expMu.Lock()
		defer h.expMu.Unlock()
		return len(h.expiring)
	}
	for time.Now().Before(deadline) && heapLen() > 2 {
		for _, c := range h.expired(nil, time.Now().UnixNano()) {
			c.expire(time.Now().UnixNano())
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	for _, c := range h.expired(nil, time.Now().UnixNano()) {
		c.expire(time.Now().UnixNano())
	}
	for i, x := range cases {
		select {
		case code := <-closed[i]:
			if !x.expired || code != CloseTokenExpired {
				t.Errorf("%s: closed with %v", x.name, code)
			}
		case <-time.After(2 * time.Second):
			if x.expired {
				t.Errorf("%s: not closed", x.name)
			}
		}
	}
	waitFor(t, "expired connections released", func() bool { return h.Stats().Connections == 3 })
	if left := heapLen(); left != 1 { // "refreshed"
		t.Fatalf("%d connections in the expiry heap, want 1", heapLen())
	}
	h.mu.Lock()
	inSlots := 0
	for _, l := range h.slots {
		for i, c := range l {
			if c.slotIdx != i {
				t.Errorf("%s at %d thinks it is at %d", c.id, i, c.slotIdx)
			}
			inSlots++
		}
	}
	h.mu.Unlock()
	if inSlots != 3 {
		t.Fatalf("%d connections in slot lists, want 3", inSlots)
	}
}

// A frame within the interval proves liveness: a client that answers every
// ping is pinged every other interval and stays open; one that keeps
// sending is not pinged at all.
func TestHeartbeatSkipsConnectionsThatSpokeWithinTheInterval(t *testing.T) {
	const interval = 160 * time.Millisecond
	h := pollingHub(t, Config{PingInterval: interval, IdleTimeout: 3 * interval})
	defer h.Close()
	dial := polledServer(t)
	run := func(busy bool) (pings int) {
		srv, opts, cli := dial()
		c, err := h.Attach(srv, "c", nil, opts)
		if err != nil {
			t.Fatal(err)
		}
		c.Start(func([]byte) {}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*interval)
		defer cancel()
		if busy {
			go func() {
				for ctx.Err() == nil {
					_ = cli.Write(ctx, websocket.MessageText, []byte(`{"type":"x"}`))
					time.Sleep(interval / 4)
				}
			}()
		}
		for {
			_, b, err := cli.Read(ctx)
			if ctx.Err() != nil {
				return pings
			}
			if err != nil {
				t.Fatalf("closed after %d pings: %v", pings, err)
			}
			if string(b) == string(pingFrame) {
				pings++
				if err := cli.Write(ctx, websocket.MessageText, []byte(`{"type":"pong"}`)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	// Ten intervals: ten pings to a client that must be asked every time.
	if n := run(false); n < 3 || n > 7 {
		t.Errorf("a client answering pings got %d pings in 10 intervals, want about 5", n)
	}
	if n := run(true); n > 1 {
		t.Errorf("a busy client got %d pings", n)
	}
}

// While a write holds the wire (the library's control frame to a peer that
// does not read), neither the heartbeat nor a delta's emitter waits for
// it: the frame goes to a worker and arrives once the wire is free.
func TestWriteNowDoesNotWaitOnABusyWire(t *testing.T) {
	for _, nw := range nowWrites(t) {
		t.Run(nw.name, func(t *testing.T) {
			h := pollingHub(t, Config{PingInterval: time.Hour})
			defer h.Close()
			c, opts, cli := attachPolled(t, h)
			w := opts.Wire.(*SocketWire)
			w.mu.Lock() // as a blocked write holds it
			returned := make(chan struct{})
			go func() { nw.write(c); close(returned) }()
			select {
			case <-returned:
			case <-time.After(5 * time.Second):
				t.Fatal("the writer waited on a busy wire")
			}
			w.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, b, err := cli.Read(ctx); err != nil || string(b) != nw.frame {
				t.Fatalf("read %q, %v; want %s", b, err, nw.frame)
			}
		})
	}
}
