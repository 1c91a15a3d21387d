package main

import (
	"strings"
	"testing"
	"time"
)

// A watcher leaves replica A mid-answer and resumes from its durable
// position on replica B (real replica processes on PostgreSQL and Redis):
// recovered:true without a snapshot, and it receives exactly the missing
// suffix of the answer, each delta in place (the message_update that ends
// streaming adds nothing it held), ending with the canonical transcript.
func TestClusterResumeOnAnotherReplicaMidAnswer(t *testing.T) {
	c := newCluster(t, clusterRedis(t), 2)
	a, b := c.replicas[0], c.replicas[1]
	sid := c.createSession(a)
	wa := c.watch(a, sid)
	wb := c.watch(b, sid) // a collaborator who stays on B

	turnID := c.submit(a, sid, "resume-1", "/sim words=600 rate=5ms")
	deadline := time.Now().Add(30 * time.Second)
	for {
		wa.mu.Lock()
		n, err := wa.deltas, wa.err
		wa.mu.Unlock()
		if err != nil {
			t.Fatalf("watcher on A: %v", err)
		}
		if n >= 40 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d deltas on A", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	wa.close() // leaves mid-answer
	wa.mu.Lock()
	seen := wa.textsLocked()
	pos := *wa.pos
	wa.record = map[string]string{}
	wa.mu.Unlock()
	time.Sleep(150 * time.Millisecond) // the answer goes on without it

	if err := wa.connect(b); err != nil {
		t.Fatalf("resume on B: %v", err)
	}
	wa.mu.Lock()
	recovered, changes := wa.recovered, wa.changes
	wa.mu.Unlock()
	if !recovered {
		t.Fatalf("resume on B from %+v: recovered = false", pos)
	}
	c.waitSettled(a, sid, turnID)
	want, tr := c.canonical(a, sid)
	if tr.Outcome != "completed" {
		t.Fatalf("turn: %+v", tr)
	}
	wa.waitTurn(turnID, want)
	wb.waitTurn(turnID, want)

	// B streamed the answer by applying A's committed deltas, not rereads.
	if v := metric(t, b, "ensemble_hub_deltas_applied_total"); v < 10 {
		t.Fatalf("B applied %v deltas", v)
	}
	// And wrote them to its watcher on the goroutine that applied them
	// (the bus receiver), not through a worker each.
	if v := metric(t, b, "ensemble_hub_inline_writes_total"); v < 10 {
		t.Fatalf("B wrote %v deltas inline", v)
	}
	wa.mu.Lock()
	defer wa.mu.Unlock()
	for _, m := range changes {
		if seen[m.ID] != "" {
			t.Fatalf("B resent message %s whole instead of its missing suffix", m.ID)
		}
	}
	for id, text := range want {
		if !strings.HasPrefix(text, seen[id]) {
			t.Fatalf("message %s: what A delivered is not a prefix of the canonical text", id)
		}
		if seen[id] == "" {
			continue // new after the position: it may come whole
		}
		if got, missing := wa.record[id], text[len(seen[id]):]; got != missing {
			t.Fatalf("message %s: after resume got %q, want exactly the missing suffix %q", id, got, missing)
		}
	}
}
