package acp_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/runtime/acp"
	"github.com/ensemble-dev/ensemble/runtime/sim"
)

// steerSink hands out its messages on the first pull only, and counts pulls.
type steerSink struct {
	*recSink
	mu    sync.Mutex
	msgs  []host.SteeringMessage
	pulls int
}

func (s *steerSink) PullSteering(context.Context) ([]host.SteeringMessage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pulls++
	out := s.msgs
	s.msgs = nil
	return out, nil
}

// The sim advertises the steering extension; an agent that does not (the
// example agent) is reported as unable, so the Host refuses steering for
// it instead of dropping it.
func TestSteeringCapabilityIsAdvertised(t *testing.T) {
	rt := acp.New(acp.Config{Name: sim.Name, Simulated: true, Logger: quietLogger(), Dial: sim.Dial(sim.Options{Logger: quietLogger()})})
	t.Cleanup(func() { _ = rt.Shutdown(context.Background()) })
	if rt.SupportsSteering("ws1", "s1") {
		t.Fatal("steering claimed before any agent connected")
	}
	start(t, rt, "s1", "")
	if !rt.SupportsSteering("ws1", "s1") {
		t.Fatal("the sim agent's steering capability is not seen")
	}
	ex := newExampleRuntime(t)
	start(t, ex, "s1", "")
	if ex.SupportsSteering("ws1", "s1") {
		t.Fatal("an agent without the extension is reported as steerable")
	}
}

// A steering notice makes the running sim prompt pull once at its next
// pull point and answer the message inside the same turn.
func TestSteeringReachesTheRunningPrompt(t *testing.T) {
	rt := acp.New(acp.Config{Name: sim.Name, Simulated: true, Logger: quietLogger(), Dial: sim.Dial(sim.Options{Logger: quietLogger()})})
	t.Cleanup(func() { _ = rt.Shutdown(context.Background()) })
	st := start(t, rt, "s1", "")
	sink := &steerSink{recSink: newSink(t), msgs: []host.SteeringMessage{{EntryID: "qe1", Author: "Bob", Content: host.MessageContent{Text: "use tabs"}}}}
	r := ref("s1", "t1")
	sink.ref = r
	if err := dispatch(rt, r, st.ProviderSessionID, "/sim hang", sink); err != nil {
		t.Fatal(err)
	}
	if err := rt.SteeringReady(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(allText(sink.snapshot()), `[Steering from Bob: "use tabs"`) {
		if time.Now().After(deadline) {
			t.Fatalf("the steering never reached the turn: %q", allText(sink.snapshot()))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := rt.Cancel(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	sink.waitTerminal(10 * time.Second)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if sink.pulls != 1 {
		t.Fatalf("pulls = %d, want 1 (one notice, one pull)", sink.pulls)
	}
	if err := rt.SteeringReady(context.Background(), r); err == nil {
		t.Fatal("a steering notice for a finished turn was accepted")
	}
}
