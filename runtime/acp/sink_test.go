package acp_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// recSink records every TurnSink call in order.
type recSink struct {
	t         *testing.T
	acceptErr error

	mu       sync.Mutex
	calls    []call
	accepted chan struct{}
	terminal chan host.Terminal
	outputs  chan host.OutputEvent
}

type call struct {
	kind     string // observed | accepted | output | terminal
	phase    host.TurnPhase
	psid     string
	turnID   string
	ev       host.OutputEvent
	terminal host.Terminal
}

func newSink(t *testing.T) *recSink {
	return &recSink{
		t:        t,
		accepted: make(chan struct{}),
		terminal: make(chan host.Terminal, 1),
		outputs:  make(chan host.OutputEvent, 4096),
	}
}

func (s *recSink) record(c call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, c)
}

func (s *recSink) Observed(_ context.Context, p host.TurnPhase) error {
	s.record(call{kind: "observed", phase: p})
	return nil
}

func (s *recSink) Accepted(_ context.Context, psid, ptid string) error {
	s.record(call{kind: "accepted", psid: psid, turnID: ptid})
	if s.acceptErr != nil {
		return s.acceptErr
	}
	close(s.accepted)
	return nil
}

func (s *recSink) Output(_ context.Context, ev host.OutputEvent) error {
	s.record(call{kind: "output", ev: ev})
	s.outputs <- ev
	return nil
}

func (s *recSink) Terminal(_ context.Context, t host.Terminal) error {
	s.record(call{kind: "terminal", terminal: t})
	select {
	case s.terminal <- t:
	default:
		s.t.Errorf("second Terminal: %+v", t)
	}
	return nil
}

func (s *recSink) snapshot() []call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]call(nil), s.calls...)
}

// waitTerminal waits for the Turn's terminal.
func (s *recSink) waitTerminal(timeout time.Duration) host.Terminal {
	s.t.Helper()
	select {
	case term := <-s.terminal:
		return term
	case <-time.After(timeout):
		s.t.Fatalf("no terminal after %v; calls: %s", timeout, s.dump())
		return host.Terminal{}
	}
}

func (s *recSink) waitAccepted(timeout time.Duration) {
	s.t.Helper()
	select {
	case <-s.accepted:
	case <-time.After(timeout):
		s.t.Fatalf("not accepted after %v; calls: %s", timeout, s.dump())
	}
}

// waitOutput waits for an output event matching f.
func (s *recSink) waitOutput(timeout time.Duration, f func(host.OutputEvent) bool) host.OutputEvent {
	s.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case ev := <-s.outputs:
			if f(ev) {
				return ev
			}
		case <-deadline:
			s.t.Fatalf("no matching output after %v; calls: %s", timeout, s.dump())
			return host.OutputEvent{}
		}
	}
}

func (s *recSink) dump() string {
	var b strings.Builder
	for _, c := range s.snapshot() {
		switch c.kind {
		case "observed":
			fmt.Fprintf(&b, "\n  observed %s", c.phase)
		case "accepted":
			fmt.Fprintf(&b, "\n  accepted %s %s", c.psid, c.turnID)
		case "output":
			fmt.Fprintf(&b, "\n  output %s %s %q done=%v tool=%+v", c.ev.Key, c.ev.Kind, c.ev.Text, c.ev.Done, c.ev.Tool)
		case "terminal":
			fmt.Fprintf(&b, "\n  terminal %+v", c.terminal)
		}
	}
	return b.String()
}

// texts concatenates the appended text per message key, in first-seen order.
func texts(calls []call) (keys []string, byKey map[string]string) {
	byKey = map[string]string{}
	for _, c := range calls {
		if c.kind != "output" {
			continue
		}
		if _, ok := byKey[c.ev.Key]; !ok {
			keys = append(keys, c.ev.Key)
		}
		byKey[c.ev.Key] += c.ev.Text
	}
	return keys, byKey
}

// checkBarrier asserts the pre-acceptance phases came in order, Accepted
// came once, and no output or terminal preceded it.
func checkBarrier(t *testing.T, calls []call) (psid, ptid string) {
	t.Helper()
	want := []host.TurnPhase{host.PhaseDispatched, host.PhaseProviderObserved, host.PhaseResolvingIdentity}
	var phases []host.TurnPhase
	accepted := -1
	for i, c := range calls {
		switch c.kind {
		case "observed":
			if accepted >= 0 {
				t.Errorf("observed %s after acceptance", c.phase)
			}
			phases = append(phases, c.phase)
		case "accepted":
			if accepted >= 0 {
				t.Errorf("Accepted called twice")
			}
			accepted = i
			psid, ptid = c.psid, c.turnID
		case "output", "terminal":
			if accepted < 0 {
				t.Fatalf("%s before Accepted: %+v", c.kind, c)
			}
		}
	}
	if accepted < 0 {
		t.Fatalf("never accepted")
	}
	if fmt.Sprint(phases) != fmt.Sprint(want) {
		t.Errorf("phases = %v, want %v", phases, want)
	}
	return psid, ptid
}
