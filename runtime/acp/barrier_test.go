package acp

import (
	"context"
	"testing"

	acpsdk "github.com/coder/acp-go-sdk"

	"github.com/ensemble-dev/ensemble/host"
)

// barrierTurn is a Turn whose queue holds items, its prompt over or not.
func barrierTurn(items []item, promptOver bool) *pumpState {
	t := &turn{psid: "ps", providerTurnID: "pt", promptDone: make(chan struct{}), queue: items}
	if promptOver {
		t.result = promptResult{resp: acpsdk.PromptResponse{StopReason: acpsdk.StopReasonEndTurn}}
		t.finished = true
		close(t.promptDone)
	}
	return &pumpState{c: &connection{rt: &Runtime{}}, t: t, m: newMapper(), children: map[string]*childTurn{}}
}

func chunk(text string) item {
	return item{update: &acpsdk.SessionUpdate{AgentMessageChunk: &acpsdk.SessionUpdateAgentMessageChunk{
		Content: acpsdk.TextBlock(text)}}}
}

func heldText(evs []host.OutputEvent) (text string, seqs []int64) {
	for _, ev := range evs {
		text += ev.Text
		seqs = append(seqs, ev.Seq)
	}
	return text, seqs
}

func TestAtBarrierTakesHeldOutputAndTheEnd(t *testing.T) {
	p := barrierTurn([]item{chunk("all "), chunk("of it")}, true)
	a, _ := p.atBarrier()
	if a.ProviderSessionID != "ps" || a.ProviderTurnID != "pt" {
		t.Fatalf("identity %q %q", a.ProviderSessionID, a.ProviderTurnID)
	}
	text, seqs := heldText(a.Output)
	// two chunks, then the message's end (mapper.finish)
	if text != "all of it" || len(seqs) != 3 || seqs[0] != 1 || seqs[2] != 3 || !a.Output[2].Done {
		t.Fatalf("held output %q %v %+v", text, seqs, a.Output)
	}
	if a.Terminal == nil || a.Terminal.Outcome != host.OutcomeCompleted || a.Terminal.StopReason != "end_turn" {
		t.Fatalf("terminal %+v", a.Terminal)
	}
	if p.t.queued() != 0 {
		t.Fatal("taken items stay queued")
	}
}

func TestAtBarrierLeavesTheEndWhileThePromptRuns(t *testing.T) {
	p := barrierTurn([]item{chunk("first words")}, false)
	a, _ := p.atBarrier()
	if text, seqs := heldText(a.Output); text != "first words" || len(seqs) != 1 || seqs[0] != 1 || a.Output[0].Done {
		t.Fatalf("held output %q %v", text, seqs)
	}
	if a.Terminal != nil {
		t.Fatalf("terminal before the prompt ended: %+v", a.Terminal)
	}
	// The pump goes on numbering where the acceptance stopped.
	if evs := p.number(p.t.sink, p.m, p.m.apply(*chunk(" more").update)); evs[0].Seq != 2 {
		t.Fatalf("next output numbered %d", evs[0].Seq)
	}
}

func TestAtBarrierStopsAtTheFirstItemThatIsNotPlainOutput(t *testing.T) {
	sub := item{update: &acpsdk.SessionUpdate{ToolCall: &acpsdk.SessionUpdateToolCall{
		ToolCallId: "tc1", Title: "delegate",
		Meta: map[string]any{metaKey: map[string]any{"subagent": map[string]any{"sessionId": "child"}}}}}}
	for name, stop := range map[string]item{
		"permission": {perm: &waiter{}},
		"withdraw":   {withdraw: &waiter{}},
		"goal":       {goal: &host.GoalReport{}},
		"child":      {child: "child", update: chunk("x").update},
		"subagent":   sub,
	} {
		t.Run(name, func(t *testing.T) {
			p := barrierTurn([]item{chunk("before"), stop, chunk("after")}, true)
			a, _ := p.atBarrier()
			if text, _ := heldText(a.Output); text != "before" || len(a.Output) != 1 {
				t.Fatalf("held output %+v", a.Output)
			}
			if a.Terminal != nil {
				t.Fatal("the terminal went ahead of queued items")
			}
			if q := p.t.take(); len(q) != 2 {
				t.Fatalf("left queued: %d items, want the %s and what follows it", len(q), name)
			}
		})
	}
}

// More takes what arrived after the barrier's first look, numbered on,
// with the end once the prompt is over, and nothing after that.
func TestAtBarrierMoreTakesWhatArrivedSince(t *testing.T) {
	p := barrierTurn([]item{chunk("first ")}, false)
	a, tookEnd := p.atBarrier()
	if a.Terminal != nil || a.More == nil || tookEnd() {
		t.Fatalf("acceptance %+v, ended %v", a, tookEnd())
	}
	if out, end := a.More(); len(out) != 0 || end != nil {
		t.Fatalf("More with nothing new: %+v %+v", out, end)
	}
	// The agent's last words and its response arrive.
	p.t.mu.Lock()
	p.t.queue = append(p.t.queue, chunk("last"))
	p.t.mu.Unlock()
	p.t.result = promptResult{resp: acpsdk.PromptResponse{StopReason: acpsdk.StopReasonEndTurn}}
	p.t.finish()
	close(p.t.promptDone)
	out, end := a.More()
	if text, seqs := heldText(out); text != "last" || len(seqs) != 2 || seqs[0] != 2 || seqs[1] != 3 || !out[1].Done {
		t.Fatalf("more output %q %v %+v", text, seqs, out)
	}
	if end == nil || end.Outcome != host.OutcomeCompleted || !tookEnd() {
		t.Fatalf("terminal %+v, ended %v", end, tookEnd())
	}
	if out, end := a.More(); len(out) != 0 || end != nil {
		t.Fatalf("More after the end: %+v %+v", out, end)
	}
}

// An item that is not plain output arriving after the barrier stops More
// as it stops the barrier: it and what follows stay for the pump.
func TestAtBarrierMoreStopsAtARequest(t *testing.T) {
	p := barrierTurn([]item{chunk("first")}, false)
	a, tookEnd := p.atBarrier()
	p.t.mu.Lock()
	p.t.queue = append(p.t.queue, item{perm: &waiter{}}, chunk("after"))
	p.t.mu.Unlock()
	p.t.finish()
	close(p.t.promptDone)
	if out, end := a.More(); len(out) != 0 || end != nil || tookEnd() {
		t.Fatalf("More took %+v %+v past a request", out, end)
	}
	if p.t.queued() != 2 {
		t.Fatalf("queued %d, want the request and the chunk after it", p.t.queued())
	}
}

// outputSink records Output calls; nothing else is expected of it.
type outputSink struct {
	host.TurnSink
	evs []host.OutputEvent
}

func (s *outputSink) Output(_ context.Context, ev host.OutputEvent) error {
	s.evs = append(s.evs, ev)
	return nil
}

// drain marks the Turn's own output event that ends what it took Inline
// (nothing is queued behind it, so the sink may commit on the pump), and
// only that one; output that ends before another kind of item is not.
func TestDrainMarksTheLastOutputInline(t *testing.T) {
	for name, tc := range map[string]struct {
		items  []item
		inline []bool
	}{
		"chunks":         {[]item{chunk("a "), chunk("b "), chunk("c")}, []bool{false, false, true}},
		"one":            {[]item{chunk("a")}, []bool{true}},
		"before a child": {[]item{chunk("a"), {child: "child", update: chunk("x").update}}, []bool{false}},
	} {
		t.Run(name, func(t *testing.T) {
			p := barrierTurn(tc.items, false)
			sink := &outputSink{}
			p.t.sink = sink
			p.drain()
			if len(sink.evs) != len(tc.inline) {
				t.Fatalf("%d events reported, want %d: %+v", len(sink.evs), len(tc.inline), sink.evs)
			}
			for i, ev := range sink.evs {
				if ev.Inline != tc.inline[i] {
					t.Errorf("event %d (%q) Inline=%v, want %v", i, ev.Text, ev.Inline, tc.inline[i])
				}
			}
		})
	}
}
