package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// wirePair is a real WebSocket pair whose server side writes through a
// SocketWire, as server/hijack.go sets it up (withWire false: through the
// library's own buffers, and the returned wire is nil).
func wirePair(t testing.TB, withWire bool) (*websocket.Conn, *SocketWire, *websocket.Conn) {
	t.Helper()
	type accepted struct {
		ws   *websocket.Conn
		wire *SocketWire
	}
	ch := make(chan accepted, 1)
	done := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hw := &wireHijack{ResponseWriter: w}
		var rw http.ResponseWriter = w
		if withWire {
			rw = hw
		}
		c, err := websocket.Accept(rw, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
		if err != nil {
			return
		}
		ch <- accepted{c, hw.wire}
		<-done
	}))
	t.Cleanup(func() { close(done); ts.Close() })
	cli, _, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(ts.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	a := <-ch
	t.Cleanup(func() { _ = cli.CloseNow(); _ = a.ws.CloseNow() })
	return a.ws, a.wire, cli
}

// holdWriter waits until c has no writer, then takes the writer slot as a
// write in flight would, so frames queue; the returned func starts the
// writer on what was queued.
func holdWriter(t *testing.T, c *Conn) (release func()) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.qmu.Lock()
		if !c.writing {
			c.writing = true
			c.qmu.Unlock()
			return func() { go c.flush() }
		}
		c.qmu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("the writer never went idle")
		}
		time.Sleep(time.Millisecond)
	}
}

// A multi-event frame (built in a pooled buffer) followed by single frames
// over the socket wire (which gathers in a pooled buffer) must reach the
// client as well-formed WebSocket frames. The pool once handed the wire a
// buffer still holding the previous batch, whose bytes went on the socket
// ahead of the next frame's header ("unexpected rsv bits").
func TestSocketWireFramesStayWellFormedAfterBatches(t *testing.T) {
	h := New(Config{Reader: &fakeReader{}, Bus: NewLocalBus()})
	defer h.Close()
	srv, wire, cli := wirePair(t, true)
	c, err := h.Attach(srv, "c", nil, ConnOptions{Batch: true, Wire: wire})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	read := func(round int, what string) []byte {
		t.Helper()
		_, data, err := cli.Read(ctx)
		if err != nil {
			t.Fatalf("round %d, reading %s: %v", round, what, err)
		}
		return data
	}
	seq := int64(0)
	for round := range 40 {
		release := holdWriter(t, c)
		const n = 8
		for range n {
			seq++
			c.enqueueEvent(&event{sub: "s", epoch: "e", seq: seq, data: fmt.Appendf(nil, `{"type":"event","seq":%d,"pad":%q}`, seq, strings.Repeat("x", 200))})
		}
		release()
		for got := 0; got < n; {
			data := read(round, "a batch")
			var batch []json.RawMessage
			if data[0] == '[' {
				if err := json.Unmarshal(data, &batch); err != nil {
					t.Fatalf("round %d: a batch is not a JSON array: %v", round, err)
				}
			} else {
				batch = []json.RawMessage{data}
			}
			got += len(batch)
		}
		want := fmt.Sprintf(`{"type":"single","round":%d}`, round)
		if !c.Send([]byte(want)) {
			t.Fatal("send refused")
		}
		if got := string(read(round, "a single frame")); got != want {
			t.Fatalf("round %d: got %.80q, want %q", round, got, want)
		}
	}
}

// getBuf hands out empty buffers whatever was put back.
func TestPooledBuffersComeBackEmpty(t *testing.T) {
	for range 100 {
		b := getBuf()
		*b = append(*b, "stale bytes"...)
		putBuf(b)
		if b := getBuf(); len(*b) != 0 {
			t.Fatalf("getBuf returned %d stale bytes", len(*b))
		}
	}
}
