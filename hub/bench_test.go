package hub

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// BenchmarkHubDeltaApply measures one streamed chunk through a session
// topic with 1 and 100 watchers: apply the committed delta to the view, encode
// the message_delta once and queue the same bytes on every watcher (no
// store read). Watchers' queues are drained outside the timer.
func BenchmarkHubDeltaApply(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("watchers=%d", n), func(b *testing.B) { benchDeltaApply(b, n) })
	}
}

func benchDeltaApply(b *testing.B, watchers int) {
	h := New(Config{Reader: &fakeReader{}, Bus: NewLocalBus(), QueueBytes: 1 << 30})
	defer h.Close()
	tp := newTopic(h, kindSession, "w", "s", 1)
	s := host.Session{WorkspaceID: "w", ID: "s", MessageVersion: 1}
	tp.sv = sessionView{session: &s, msgs: map[string]*viewMsg{}, lastVer: 1, clean: true}
	tp.sv.put(newViewMsg(host.Message{WorkspaceID: "w", SessionID: "s", ID: "m", TurnID: "t", Role: host.RoleAgent,
		Kind: host.KindText, Version: 1, Ordinal: 1, Streaming: true, Content: host.MessageContent{Text: "Hello"}}))
	tp.loaded = true
	conns := make([]*Conn, watchers)
	for i := range conns {
		srv, _ := wsPair(b)
		c, err := h.Attach(srv, "c", nil, ConnOptions{})
		if err != nil {
			b.Fatal(err)
		}
		conns[i] = c
		tp.subs[c] = struct{}{}
	}
	at := time.Now()
	chunk := "streams words 👋 "
	off := host.UTF16Len("Hello")
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		v := int64(i) + 2
		d := host.TranscriptDelta{FromVersion: v - 1, ToVersion: v, At: at, Messages: []host.MessageChange{{
			ID: "m", TurnID: "t", Version: v, Offset: off, Text: chunk, UpdatedAt: at}}}
		var w writeScope
		if !tp.applyDelta(&d, &w) {
			b.Fatal("delta refused")
		}
		w.write()
		off += host.UTF16Len(chunk)
		if i%64 == 63 {
			b.StopTimer()
			for _, c := range conns {
				c.qmu.Lock()
				for c.take(nil) != nil {
				}
				c.qmu.Unlock()
			}
			b.StartTimer()
		}
	}
}

// BenchmarkHubRereadChunk is the reference for BenchmarkHubDeltaApply: the
// same streamed chunk turned into an encoded event through a reread of a
// real SQLite store (one Changes read transaction), as a topic does after a gap
// or an untyped fact. The commit itself is outside the timer.
func BenchmarkHubRereadChunk(b *testing.B) {
	st := openSQLite(b)
	w := newTranscriptWriter(b, st, 1)
	bus := NewLocalBus()
	reader := host.New(host.Config{Store: st})
	h := New(Config{Reader: reader, Goals: reader, Queues: reader, Agent: reader, Bus: bus, Workers: 1})
	defer h.Close()
	s := &stream{w: w, bus: NewLocalBus(), id: "answer"} // deltas go nowhere: the hub must reread
	s.chunk(b, "Hello")
	tp := loadedTopic(b, h, w.ws, w.sid)
	defer h.release(tp)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		s.chunk(b, "streams words 👋 ")
		b.StartTimer()
		if err := tp.refresh(context.Background(), dirtySet{transcript: true}); err != nil {
			b.Fatal(err)
		}
	}
}
