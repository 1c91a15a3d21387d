package hub

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// pollHijack sets a connection up as server/hijack.go does: a small read
// buffer, a socket wire, and the socket and reader for readiness polling.
type pollHijack struct {
	http.ResponseWriter
	opts ConnOptions
}

func (w *pollHijack) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, _, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	sr := NewSocketReader(nc)
	br := bufio.NewReaderSize(sr, 256)
	wire := NewSocketWire(nc)
	w.opts = ConnOptions{Wire: wire, Socket: nc.(*net.TCPConn), Reader: br, Drain: sr}
	return sr, bufio.NewReadWriter(br, bufio.NewWriterSize(wire, 16)), nil
}

// polledServer accepts WebSockets whose handler returns after the upgrade,
// as the server's does.
func polledServer(t testing.TB) (dial func() (srv *websocket.Conn, opts ConnOptions, cli *websocket.Conn)) {
	t.Helper()
	type accepted struct {
		ws   *websocket.Conn
		opts ConnOptions
	}
	ch := make(chan accepted, 1)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hw := &pollHijack{ResponseWriter: w}
		c, err := websocket.Accept(hw, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
		if err != nil {
			return
		}
		ch <- accepted{c, hw.opts}
	}))
	t.Cleanup(ts.Close)
	return func() (*websocket.Conn, ConnOptions, *websocket.Conn) {
		cli, _, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(ts.URL, "http"), nil)
		if err != nil {
			t.Fatal(err)
		}
		a := <-ch
		t.Cleanup(func() { _ = cli.CloseNow(); _ = a.ws.CloseNow() })
		return a.ws, a.opts, cli
	}
}

func pollingHub(t *testing.T, cfg Config) *Hub {
	t.Helper()
	cfg.Reader, cfg.Bus = &fakeReader{}, NewLocalBus()
	h := New(cfg)
	if h.poll == nil {
		h.Close()
		t.Skip("no readiness polling on this platform")
	}
	return h
}

// waitFor polls cond until it holds; the deadline only bounds a hang.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatal(what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Idle polled connections hold no goroutine; frames, including several
// that arrive in one read (the library's reader buffers them, the socket
// signals nothing more), are handled one at a time and in order.
func TestPolledConnectionsHaveNoGoroutineAndKeepOrder(t *testing.T) {
	h := pollingHub(t, Config{})
	defer h.Close()
	dial := polledServer(t)
	base := runtime.NumGoroutine()
	const conns, frames = 40, 200
	type conn struct {
		c   *Conn
		cli *websocket.Conn
		got chan string
	}
	var cs []conn
	for i := range conns {
		srv, opts, cli := dial()
		c, err := h.Attach(srv, fmt.Sprint("c", i), nil, opts)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan string, frames)
		inHandle := make(chan struct{}, 1)
		c.Start(func(b []byte) {
			select {
			case inHandle <- struct{}{}:
			default:
				t.Error("handle ran twice at once")
			}
			got <- string(b)
			<-inHandle
		}, nil)
		cs = append(cs, conn{c, cli, got})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, x := range cs {
		for j := range frames {
			if err := x.cli.Write(ctx, websocket.MessageText, fmt.Appendf(nil, "%d", j)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, x := range cs {
		for j := range frames {
			select {
			case s := <-x.got:
				if s != fmt.Sprint(j) {
					t.Fatalf("conn %d: frame %d is %q", i, j, s)
				}
			case <-ctx.Done():
				t.Fatalf("conn %d: frame %d never handled", i, j)
			}
		}
	}
	// A reader goroutine each would add 40; the clients hold none while
	// they do not read, and pooled workers (spawn.go) are the hub's, bounded
	// whatever the number of connections.
	waitFor(t, "idle polled connections keep goroutines", func() bool {
		return runtime.NumGoroutine()-base-int(h.pooled.Load()) < conns/4
	})
}

// A polled connection ends, and its ended callback runs once, whoever
// closes it: the client, the hub while the connection is idle, or the
// hub while frames are arriving.
func TestPolledConnectionEnds(t *testing.T) {
	h := pollingHub(t, Config{})
	defer h.Close()
	dial := polledServer(t)
	start := func() (*Conn, *websocket.Conn, chan struct{}) {
		srv, opts, cli := dial()
		c, err := h.Attach(srv, "c", nil, opts)
		if err != nil {
			t.Fatal(err)
		}
		ended := make(chan struct{})
		c.Start(func([]byte) {}, func() { close(ended) }) // a second call panics
		return c, cli, ended
	}
	wait := func(what string, c *Conn, ended chan struct{}) {
		t.Helper()
		select {
		case <-ended:
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: never ended", what)
		}
		<-c.Done()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c, cli, ended := start()
	_ = cli.Close(websocket.StatusNormalClosure, "bye")
	wait("client close", c, ended)

	c, cli, ended = start()
	go func(cli *websocket.Conn) { _, _, _ = cli.Read(ctx) }(cli) // answers the close handshake
	c.Close(CloseIdle, "idle timeout")
	wait("hub close while idle", c, ended)

	for i := range 20 {
		c, cli, ended := start()
		stop := make(chan struct{})
		go func() {
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				if cli.Write(ctx, websocket.MessageText, []byte("x")) != nil {
					return
				}
			}
		}()
		go func() { _, _, _ = cli.Read(ctx) }()
		time.Sleep(time.Duration(i) * time.Millisecond)
		c.Close(CloseIdle, "idle timeout")
		wait(fmt.Sprintf("hub close while frames arrive (%d)", i), c, ended)
		close(stop)
	}

	c, cli, ended = start()
	go func(cli *websocket.Conn) { _, _, _ = cli.Read(ctx) }(cli)
	h.Close()
	wait("hub shutdown", c, ended)
	if n := h.Stats().Connections; n != 0 {
		t.Fatalf("%d connections still attached", n)
	}
}

// A polled connection that never sends is still closed by the heartbeat.
func TestPolledHeartbeatClosesIdle(t *testing.T) {
	h := pollingHub(t, Config{PingInterval: 160 * time.Millisecond, IdleTimeout: 600 * time.Millisecond})
	defer h.Close()
	srv, opts, cli := polledServer(t)()
	c, err := h.Attach(srv, "c", nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan struct{})
	c.Start(func([]byte) {}, func() { close(ended) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		_, _, err := cli.Read(ctx)
		if err != nil {
			if code := websocket.CloseStatus(err); code != CloseIdle {
				t.Fatalf("closed with %v, want 4002", err)
			}
			break
		}
	}
	<-ended
}

// Under edge-triggered polling a frame that arrives while the previous
// one is being handled raises its event while the read side is held; the
// read job must look again before it hands the side back, or the frame
// would wait for the client's next one. Each round the handler holds the
// first frame until the second is surely in the socket.
func TestPolledFrameArrivingDuringHandleIsRead(t *testing.T) {
	h := pollingHub(t, Config{})
	defer h.Close()
	dial := polledServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for round := range 20 {
		srv, opts, cli := dial()
		c, err := h.Attach(srv, fmt.Sprint("c", round), nil, opts)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan string, 2)
		hold := make(chan struct{})
		c.Start(func(b []byte) {
			got <- string(b)
			if string(b) == "first" {
				<-hold
			}
		}, nil)
		if err := cli.Write(ctx, websocket.MessageText, []byte("first")); err != nil {
			t.Fatal(err)
		}
		if b := <-got; b != "first" {
			t.Fatalf("got %q first", b)
		}
		if err := cli.Write(ctx, websocket.MessageText, []byte("second")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(round%4) * 5 * time.Millisecond) // the event comes while the side is held
		close(hold)
		select {
		case b := <-got:
			if b != "second" {
				t.Fatalf("got %q second", b)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: a frame that arrived during handle was never read", round)
		}
		c.Close(CloseIdle, "done")
	}
}
