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
	// moreUntilEnd: the acceptance calls More until the terminal comes, as
	// if its read of the Turn took as long as the agent's answer.
	moreUntilEnd bool

	mu       sync.Mutex
	calls    []call
	accepted chan struct{}
	terminal chan host.Terminal
	outputs  chan host.OutputEvent
	asks     chan host.InteractionRequest
	children chan *recSink
	// ref is the canonical Turn this sink records (sub-agents get their own).
	ref host.TurnRef
}

type call struct {
	kind     string // observed | accepted | output | terminal | interaction | withdraw | subagent
	ask      host.InteractionRequest
	request  string
	phase    host.TurnPhase
	psid     string
	turnID   string
	ev       host.OutputEvent
	terminal host.Terminal
	// held and heldTerminal: what an acceptance carried.
	held         int
	heldTerminal bool
}

func newSink(t *testing.T) *recSink {
	return &recSink{
		t:        t,
		accepted: make(chan struct{}),
		terminal: make(chan host.Terminal, 1),
		outputs:  make(chan host.OutputEvent, 4096),
		asks:     make(chan host.InteractionRequest, 64),
		children: make(chan *recSink, 16),
	}
}

func (s *recSink) Interaction(_ context.Context, req host.InteractionRequest) error {
	s.record(call{kind: "interaction", ask: req})
	s.asks <- req
	return nil
}

func (s *recSink) Withdraw(_ context.Context, requestID string) error {
	s.record(call{kind: "withdraw", request: requestID})
	return nil
}

// ReportGoal and PullSteering: the sim agent sends neither unless a test
// asks for it (steerSink overrides PullSteering).
func (s *recSink) ReportGoal(context.Context, host.GoalReport) error { return nil }

func (s *recSink) PullSteering(context.Context) ([]host.SteeringMessage, error) { return nil, nil }

func (s *recSink) Subagent(_ context.Context, req host.SubagentRequest) (host.TurnRef, host.TurnSink, error) {
	s.record(call{kind: "subagent", psid: req.ProviderSessionID, turnID: req.ProviderTurnID})
	child := newSink(s.t)
	child.ref = host.TurnRef{WorkspaceID: s.ref.WorkspaceID, SessionID: "child-" + req.ProviderSessionID, TurnID: "child-turn"}
	close(child.accepted)
	s.children <- child
	return child.ref, child, nil
}

// waitAsk waits for the next interaction the runtime reported.
func (s *recSink) waitAsk(timeout time.Duration) host.InteractionRequest {
	s.t.Helper()
	select {
	case a := <-s.asks:
		return a
	case <-time.After(timeout):
		s.t.Fatalf("no interaction after %v; calls: %s", timeout, s.dump())
		return host.InteractionRequest{}
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

// Accepted records the acceptance, then what went with it as the output and
// terminal calls it stands for (held counts them), so every test reads one
// sequence of calls.
// It calls More once, as the Host does after reading the Turn.
func (s *recSink) Accepted(ctx context.Context, a host.Acceptance) error {
	deadline := time.Now().Add(wait)
	for a.More != nil && a.Terminal == nil {
		more, end := a.More()
		a.Output, a.Terminal = append(a.Output, more...), end
		if !s.moreUntilEnd || end != nil {
			break
		}
		if time.Now().After(deadline) {
			s.t.Errorf("More gave no terminal in %v", wait)
			break
		}
		time.Sleep(time.Millisecond)
	}
	s.record(call{kind: "accepted", psid: a.ProviderSessionID, turnID: a.ProviderTurnID,
		held: len(a.Output), heldTerminal: a.Terminal != nil})
	if s.acceptErr != nil {
		return s.acceptErr
	}
	close(s.accepted)
	for _, ev := range a.Output {
		_ = s.Output(ctx, ev)
	}
	if a.Terminal != nil {
		_ = s.Terminal(ctx, *a.Terminal)
	}
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
		case "interaction":
			fmt.Fprintf(&b, "\n  interaction %s %s %q", c.ask.RequestID, c.ask.Kind, c.ask.Title)
		case "withdraw", "subagent":
			fmt.Fprintf(&b, "\n  %s %s %s", c.kind, c.request, c.psid)
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
		case "output", "terminal", "interaction", "subagent":
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
