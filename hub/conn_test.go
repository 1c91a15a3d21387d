package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// busy holds c's writer slot, as a write in flight would, so frames
// queue; release starts the writer on what was queued.
func busy(c *Conn) (release func()) {
	c.qmu.Lock()
	c.writing = true
	c.qmu.Unlock()
	return func() { go c.flush() }
}

func readFrames(t *testing.T, cli *websocket.Conn, events int) (frames [][]json.RawMessage) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got := 0
	for got < events {
		_, data, err := cli.Read(ctx)
		if err != nil {
			t.Fatalf("read after %d events: %v", got, err)
		}
		var batch []json.RawMessage
		if data[0] == '[' {
			if err := json.Unmarshal(data, &batch); err != nil {
				t.Fatalf("batch is not a JSON array: %v", err)
			}
		} else {
			batch = []json.RawMessage{data}
		}
		frames = append(frames, batch)
		got += len(batch)
	}
	return frames
}

func seqOf(t *testing.T, raw json.RawMessage) int64 {
	var f struct{ Seq int64 }
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	return f.Seq
}

// A client that opted in gets what queued behind a write in flight as
// multi-event frames of at most 64 events, in order; one that did not
// gets one event per frame.
func TestWriterBatchesOnlyForClientsThatOptIn(t *testing.T) {
	for _, batch := range []bool{true, false} {
		t.Run(fmt.Sprint("batch=", batch), func(t *testing.T) {
			h := New(Config{Reader: &fakeReader{}, Bus: NewLocalBus()})
			defer h.Close()
			srv, cli := wsPair(t)
			c, err := h.Attach(srv, "c", nil, ConnOptions{Batch: batch})
			if err != nil {
				t.Fatal(err)
			}
			release := busy(c)
			const n = 100
			for i := int64(1); i <= n; i++ {
				c.enqueueEvent(&event{sub: "s", epoch: "e", seq: i, data: fmt.Appendf(nil, `{"type":"event","seq":%d}`, i)})
			}
			release()
			frames := readFrames(t, cli, n)
			want := int64(1)
			for _, f := range frames {
				if len(f) > batchFrames {
					t.Fatalf("a frame carries %d events", len(f))
				}
				for _, ev := range f {
					if s := seqOf(t, ev); s != want {
						t.Fatalf("seq %d, want %d", s, want)
					}
					want++
				}
			}
			if batch && len(frames) != 2 || !batch && len(frames) != n {
				t.Fatalf("batch=%v: %d frames for %d events", batch, len(frames), n)
			}
			// The counters the storm's frames-per-write figure reads.
			if st := h.Stats(); st.Writes != int64(len(frames)) || st.FramesWritten != n {
				t.Fatalf("stats: %d writes carrying %d frames, want %d carrying %d", st.Writes, st.FramesWritten, len(frames), n)
			}
		})
	}
}

// A write that does not finish within WriteTimeout (the peer stopped
// reading) is a slow consumer: counted, and the socket dropped.
func TestBlockedWriteIsASlowConsumer(t *testing.T) {
	h := New(Config{Reader: &fakeReader{}, Bus: NewLocalBus(), WriteTimeout: 200 * time.Millisecond})
	defer h.Close()
	srv, _ := wsPair(t) // the client never reads
	c, err := h.Attach(srv, "c", nil, ConnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	go c.Run(func([]byte) {})
	big := []byte(`"` + strings.Repeat("x", 256<<10) + `"`)
	for deadline := time.Now().Add(20 * time.Second); c.Send(big); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a peer that never reads was not closed")
		}
	}
	waitUntil(t, func() bool { return h.Stats().SlowConsumers == 1 })
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("slow consumer not released")
	}
	if q := h.Stats().QueuedBytes; q != 0 {
		t.Fatalf("%d bytes still accounted as queued", q)
	}
}

// The heartbeat pings every connection from one ticker and closes one
// that stays silent past IdleTimeout with 4002.
func TestHeartbeatPingsAndClosesIdle(t *testing.T) {
	h := New(Config{Reader: &fakeReader{}, Bus: NewLocalBus(), PingInterval: 160 * time.Millisecond, IdleTimeout: 600 * time.Millisecond})
	defer h.Close()
	srv, cli := wsPair(t)
	c, err := h.Attach(srv, "c", nil, ConnOptions{})
	if err != nil {
		t.Fatal(err)
	}
	go c.Run(func([]byte) {})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pings := 0
	for {
		_, data, err := cli.Read(ctx)
		if err != nil {
			if code := websocket.CloseStatus(err); code != CloseIdle {
				t.Fatalf("closed with %v (%d pings), want 4002", err, pings)
			}
			break
		}
		if string(data) == string(pingFrame) {
			pings++
		}
	}
	if pings < 2 {
		t.Fatalf("%d pings before the idle close", pings)
	}
}
