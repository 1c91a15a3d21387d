package hub

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
)

// wireHijack gives the library small buffers over a SocketWire, as the
// server does.
type wireHijack struct {
	http.ResponseWriter
	wire *SocketWire
}

func (w *wireHijack) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, _, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.wire = NewSocketWire(nc)
	return nc, bufio.NewReadWriter(bufio.NewReaderSize(nc, 256), bufio.NewWriterSize(w.wire, 16)), nil
}

// benchConn is a hub connection whose client reads and counts events.
func benchConn(b *testing.B, h *Hub, opts ConnOptions, withWire bool) (*Conn, *atomic.Int64) {
	srv, wire, cli := wirePair(b, withWire)
	cli.SetReadLimit(1 << 20)
	if withWire {
		opts.Wire = wire // a nil *SocketWire would be a non-nil Wire
	}
	c, err := h.Attach(srv, "bench", nil, opts)
	if err != nil {
		b.Fatal(err)
	}
	var got atomic.Int64
	go func() {
		for {
			_, data, err := cli.Read(context.Background())
			if err != nil {
				return
			}
			got.Add(int64(strings.Count(string(data), `"type":"event"`)))
		}
	}()
	return c, &got
}

// BenchmarkConnWriter: one event (a typical ~200-byte message_delta)
// queued and written per iteration, in bursts of 16 as a streaming turn
// produces them.
func BenchmarkConnWriter(b *testing.B) {
	for _, v := range []struct {
		name        string
		batch, wire bool
	}{{"v1", false, false}, {"v1-wire", false, true}, {"v2-batch", true, false}, {"v2-batch-wire", true, true}} {
		b.Run(v.name, func(b *testing.B) {
			h := New(Config{Reader: &fakeReader{}, Bus: NewLocalBus()})
			defer h.Close()
			c, got := benchConn(b, h, ConnOptions{Batch: v.batch}, v.wire)
			data := fmt.Appendf(nil, `{"type":"event","sub":"session:w/s","epoch":"e.1","seq":1,"kind":"message_delta","payload":{"text":"%s"}}`, strings.Repeat("w", 120))
			ev := &event{sub: "session:w/s", epoch: "e.1", seq: 1, data: data}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c.enqueueEvent(ev)
				if i%16 == 15 {
					for got.Load() < int64(i+1)-256 { // bounded lag: measure throughput, not queueing
						runtimeGosched()
					}
				}
			}
			for got.Load() < int64(b.N) {
				runtimeGosched()
			}
		})
	}
}

func runtimeGosched() { runtime.Gosched() }
