package sim_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/runtime/sim"
)

// /sim stamp appends the wall-clock emission time to every answer chunk.
func TestStampDirective(t *testing.T) {
	s := serve(t, context.Background(), sim.Options{Rate: -1}, &client{})
	sid := s.newSession(t)
	before := time.Now().UnixNano()
	if _, err := s.prompt(sid, "/sim words=5 stamp"); err != nil {
		t.Fatal(err)
	}
	after := time.Now().UnixNano()
	var chunks []string
	for _, u := range s.client.take() {
		if u.AgentMessageChunk != nil && u.AgentMessageChunk.Content.Text != nil {
			chunks = append(chunks, u.AgentMessageChunk.Content.Text.Text)
		}
	}
	if len(chunks) != 5 {
		t.Fatalf("%d chunks, want 5: %q", len(chunks), chunks)
	}
	for _, c := range chunks {
		_, ts, ok := strings.Cut(c, "@")
		n, err := strconv.ParseInt(ts, 10, 64)
		if !ok || err != nil || n < before || n > after {
			t.Errorf("chunk %q: no emission time between %d and %d", c, before, after)
		}
	}
}
