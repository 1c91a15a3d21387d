package hub

import (
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
	off := utf16Len("Hello")
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		v := int64(i) + 2
		d := host.TranscriptDelta{FromVersion: v - 1, ToVersion: v, At: at, Messages: []host.MessageChange{{
			ID: "m", TurnID: "t", Version: v, Offset: off, Text: chunk, UpdatedAt: at}}}
		if !tp.applyDelta(&d) {
			b.Fatal("delta refused")
		}
		off += utf16Len(chunk)
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
