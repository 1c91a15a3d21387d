package acp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/runtime/acp"
	"github.com/ensemble-dev/ensemble/runtime/sim"
)

const wait = 10 * time.Second

// quietLogger discards logs unless ENSEMBLE_TEST_LOG is set.
func quietLogger() *slog.Logger {
	if os.Getenv("ENSEMBLE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// newSimRuntime runs runtime/acp against the in-process sim agent.
func newSimRuntime(t *testing.T) *acp.Runtime {
	t.Helper()
	rt := acp.New(acp.Config{
		Name:      sim.Name,
		Simulated: true,
		Dial:      sim.Dial(sim.Options{Rate: time.Millisecond, Logger: quietLogger()}),
		Cwd:       t.TempDir(),
		Logger:    quietLogger(),
	})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if err := rt.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return rt
}

func ref(session, turn string) host.TurnRef {
	return host.TurnRef{WorkspaceID: "ws1", SessionID: session, TurnID: turn}
}

func start(t *testing.T, rt *acp.Runtime, session, psid string) host.StartResult {
	t.Helper()
	res, err := rt.Start(context.Background(), host.StartRequest{WorkspaceID: "ws1", SessionID: session, ProviderSessionID: psid})
	if err != nil {
		t.Fatalf("start %s: %v", session, err)
	}
	return res
}

func dispatch(rt *acp.Runtime, r host.TurnRef, psid, text string, sink host.TurnSink) error {
	if rs, ok := sink.(*recSink); ok {
		rs.ref = r
	}
	return rt.Dispatch(context.Background(), host.DispatchRequest{
		Ref: r, ProviderSessionID: psid, ClientSubmitID: "submit-" + r.TurnID,
		Content: host.MessageContent{Text: text}, OccurredAt: time.Now(),
	}, sink)
}

func TestDescribe(t *testing.T) {
	rt := acp.New(acp.Config{Name: sim.Name, Simulated: true, Dial: sim.Dial(sim.Options{})})
	if got := rt.Describe(); got != (host.AgentInfo{Name: sim.Name, Simulated: true}) {
		t.Fatalf("Describe = %+v", got)
	}
	// Once the agent has introduced itself, its own version is known.
	start(t, rt, "s1", "")
	if got := rt.Describe(); got != (host.AgentInfo{Name: sim.Name, Version: "1", Simulated: true}) {
		t.Fatalf("Describe after initialize = %+v", got)
	}
	if err := rt.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestStreamsTextInOrderAfterAcceptance(t *testing.T) {
	rt := newSimRuntime(t)
	st := start(t, rt, "s1", "")
	if !st.Created || st.Resumed || st.ProviderSessionID == "" {
		t.Fatalf("start = %+v", st)
	}
	sink := newSink(t)
	if err := dispatch(rt, ref("s1", "t1"), st.ProviderSessionID, "/sim words=40\nplease talk", sink); err != nil {
		t.Fatalf("dispatch: %v", err)
	}
	term := sink.waitTerminal(wait)
	if term != (host.Terminal{Outcome: host.OutcomeCompleted, StopReason: "end_turn"}) {
		t.Fatalf("terminal = %+v", term)
	}
	calls := sink.snapshot()
	psid, ptid := checkBarrier(t, calls)
	if psid != st.ProviderSessionID {
		t.Errorf("accepted provider session %q, want %q", psid, st.ProviderSessionID)
	}
	if !strings.Contains(ptid, ":"+psid+":") {
		t.Errorf("provider turn id %q does not name the provider session", ptid)
	}
	keys, byKey := texts(calls)
	if len(keys) != 1 || keys[0] != "text-1" {
		t.Fatalf("keys = %v; calls: %s", keys, sink.dump())
	}
	words := strings.Fields(byKey["text-1"])
	if len(words) != 40 {
		t.Errorf("streamed %d words, want 40: %q", len(words), byKey["text-1"])
	}
	// Chunks arrive as separate events, in order, and the message ends done.
	var outputs []host.OutputEvent
	for _, c := range calls {
		if c.kind == "output" {
			outputs = append(outputs, c.ev)
		}
	}
	if len(outputs) < 40 {
		t.Errorf("got %d output events, want one per word", len(outputs))
	}
	if last := outputs[len(outputs)-1]; !last.Done || last.Key != "text-1" {
		t.Errorf("last output = %+v, want text-1 done", last)
	}
	for _, ev := range outputs[:len(outputs)-1] {
		if ev.Done {
			t.Errorf("message done before the end: %+v", ev)
		}
	}

	// A second prompt gets a fresh provider turn id.
	sink2 := newSink(t)
	if err := dispatch(rt, ref("s1", "t2"), st.ProviderSessionID, "again", sink2); err != nil {
		t.Fatalf("dispatch 2: %v", err)
	}
	sink2.waitTerminal(wait)
	_, ptid2 := checkBarrier(t, sink2.snapshot())
	if ptid2 == ptid {
		t.Errorf("provider turn id reused: %q", ptid)
	}
	_, byKey2 := texts(sink2.snapshot())
	if strings.Contains(byKey2["text-1"], "Hello! I'm the Ensemble sim agent") {
		t.Errorf("second answer greets like a first one: %q", byKey2["text-1"])
	}
}

func TestToolCallBetweenText(t *testing.T) {
	rt := newSimRuntime(t)
	st := start(t, rt, "s1", "")
	sink := newSink(t)
	if err := dispatch(rt, ref("s1", "t1"), st.ProviderSessionID, "/sim tool think\nlook at the readme", sink); err != nil {
		t.Fatalf("dispatch: %v", err)
	}
	if term := sink.waitTerminal(wait); term.Outcome != host.OutcomeCompleted {
		t.Fatalf("terminal = %+v", term)
	}
	calls := sink.snapshot()
	checkBarrier(t, calls)
	keys, byKey := texts(calls)
	want := []string{"thought-1", "text-1", "tool-sim-tool-1", "text-2"}
	if strings.Join(keys, ",") != strings.Join(want, ",") {
		t.Fatalf("keys = %v, want %v; calls: %s", keys, want, sink.dump())
	}
	if byKey["text-1"] == "" || byKey["text-2"] == "" || byKey["thought-1"] == "" {
		t.Errorf("empty text: %v", byKey)
	}
	var statuses []string
	var final *host.ToolCall
	textOneDone := false
	for _, c := range calls {
		if c.kind != "output" {
			continue
		}
		if c.ev.Key == "text-1" && c.ev.Done {
			textOneDone = true
		}
		if c.ev.Kind == host.KindToolCall {
			if !textOneDone {
				t.Errorf("tool call before text-1 was closed")
			}
			if c.ev.Tool == nil {
				t.Fatalf("tool event without tool: %+v", c.ev)
			}
			statuses = append(statuses, c.ev.Tool.Status)
			final = c.ev.Tool
			if c.ev.Done != (c.ev.Tool.Status == "completed") {
				t.Errorf("tool Done=%v with status %s", c.ev.Done, c.ev.Tool.Status)
			}
		}
	}
	if strings.Join(statuses, ",") != "pending,in_progress,completed" {
		t.Errorf("tool statuses = %v", statuses)
	}
	if final.ID != "sim-tool-1" || final.Kind != "read" || !strings.Contains(final.Title, "README") {
		t.Errorf("tool = %+v", final)
	}
	var input map[string]any
	if err := json.Unmarshal(final.Input, &input); err != nil || input["path"] != "README.md" {
		t.Errorf("tool input = %s (%v)", final.Input, err)
	}
	if !strings.Contains(final.Output, "Simulated project") {
		t.Errorf("tool output = %q", final.Output)
	}
}

func TestFailIsExplicitRejection(t *testing.T) {
	rt := newSimRuntime(t)
	st := start(t, rt, "s1", "")
	sink := newSink(t)
	err := dispatch(rt, ref("s1", "t1"), st.ProviderSessionID, "/sim fail", sink)
	var pe *host.ProviderError
	if !errors.As(err, &pe) {
		t.Fatalf("dispatch err = %v (%T), want *host.ProviderError", err, err)
	}
	for _, c := range sink.snapshot() {
		if c.kind != "observed" {
			t.Errorf("unexpected %s call after a rejection: %+v", c.kind, c)
		}
	}
	// The session is free again.
	sink2 := newSink(t)
	if err := dispatch(rt, ref("s1", "t2"), st.ProviderSessionID, "hello", sink2); err != nil {
		t.Fatalf("dispatch after rejection: %v", err)
	}
	if term := sink2.waitTerminal(wait); term.Outcome != host.OutcomeCompleted {
		t.Fatalf("terminal = %+v", term)
	}
}

func TestErrorAfterAcceptanceFailsTurn(t *testing.T) {
	rt := newSimRuntime(t)
	st := start(t, rt, "s1", "")
	sink := newSink(t)
	if err := dispatch(rt, ref("s1", "t1"), st.ProviderSessionID, "/sim words=50 error-after=5", sink); err != nil {
		t.Fatalf("dispatch: %v", err)
	}
	term := sink.waitTerminal(wait)
	if term.Outcome != host.OutcomeFailed || term.Reason != host.ReasonProviderError || term.StateLost {
		t.Fatalf("terminal = %+v", term)
	}
	_, byKey := texts(sink.snapshot())
	if n := len(strings.Fields(byKey["text-1"])); n != 5 {
		t.Errorf("streamed %d words before the error, want 5", n)
	}
}

func TestCancelHangingTurn(t *testing.T) {
	rt := newSimRuntime(t)
	st := start(t, rt, "s1", "")

	rep, err := rt.Cancel(context.Background(), ref("s1", "nope"))
	if err != nil || rep.Confirmed {
		t.Fatalf("cancel of unknown turn = %+v, %v", rep, err)
	}

	sink := newSink(t)
	if err := dispatch(rt, ref("s1", "t1"), st.ProviderSessionID, "/sim hang", sink); err != nil {
		t.Fatalf("dispatch: %v", err)
	}
	sink.waitOutput(wait, func(ev host.OutputEvent) bool { return strings.Contains(ev.Text, "hanging") })

	// The session is busy while the prompt runs.
	busy := newSink(t)
	err = dispatch(rt, ref("s1", "t2"), st.ProviderSessionID, "hello", busy)
	// A local refusal, not the provider's: the Host keeps the claim retryable.
	var le *host.LocalError
	if !errors.As(err, &le) || le.Code != "session_busy" {
		t.Fatalf("dispatch into a busy session = %v (%T), want *host.LocalError", err, err)
	}
	if len(busy.snapshot()) != 0 {
		t.Errorf("busy refusal reported to the sink: %s", busy.dump())
	}

	rep, err = rt.Cancel(context.Background(), ref("s1", "t1"))
	if err != nil || !rep.Confirmed {
		t.Fatalf("cancel = %+v, %v", rep, err)
	}
	term := sink.waitTerminal(wait)
	if term != (host.Terminal{Outcome: host.OutcomeCanceled, StopReason: "cancelled"}) {
		t.Fatalf("terminal = %+v", term)
	}
	checkBarrier(t, sink.snapshot())
}

func TestCrashLosesStateAndNextStartReconnects(t *testing.T) {
	rt := newSimRuntime(t)
	a := start(t, rt, "a", "")
	b := start(t, rt, "b", "")

	hang := newSink(t)
	if err := dispatch(rt, ref("a", "t1"), a.ProviderSessionID, "/sim hang", hang); err != nil {
		t.Fatalf("dispatch hang: %v", err)
	}
	hang.waitAccepted(wait)
	_, oldTurnID := checkBarrier(t, hang.snapshot())

	crash := newSink(t)
	err := dispatch(rt, ref("b", "t1"), b.ProviderSessionID, "/sim crash", crash)
	var pe *host.ProviderError
	if errors.As(err, &pe) {
		t.Fatalf("crash reported as an explicit rejection: %v", err)
	}
	if err == nil {
		if term := crash.waitTerminal(wait); !term.StateLost {
			t.Errorf("crashing turn terminal = %+v, want StateLost", term)
		}
	}
	// The other in-flight Turn on the same connection is lost too.
	if term := hang.waitTerminal(wait); term != (host.Terminal{StateLost: true}) {
		t.Fatalf("hanging turn terminal = %+v, want StateLost", term)
	}

	// Live sessions were forgotten: Start launches a new agent, which does
	// not know the old provider session and says so; the explicit fresh
	// start (no provider session id) works.
	_, err = rt.Start(context.Background(), host.StartRequest{WorkspaceID: "ws1", SessionID: "a", ProviderSessionID: a.ProviderSessionID})
	if !errors.Is(err, host.ErrContextLost) {
		t.Fatalf("start after crash = %v, want ErrContextLost", err)
	}
	again, err := rt.Start(context.Background(), host.StartRequest{WorkspaceID: "ws1", SessionID: "a"})
	if err != nil {
		t.Fatalf("fresh start after crash: %v", err)
	}
	if !again.Created || again.Resumed || again.ProviderSessionID == a.ProviderSessionID {
		t.Fatalf("start after crash = %+v", again)
	}
	sink := newSink(t)
	if err := dispatch(rt, ref("a", "t2"), again.ProviderSessionID, "hello again", sink); err != nil {
		t.Fatalf("dispatch after crash: %v", err)
	}
	if term := sink.waitTerminal(wait); term.Outcome != host.OutcomeCompleted {
		t.Fatalf("terminal = %+v", term)
	}
	_, newTurnID := checkBarrier(t, sink.snapshot())
	// The identity is Ensemble's correlation id bound to the agent's
	// session id and the prompt request's messageId, never reused.
	for _, id := range []string{oldTurnID, newTurnID} {
		parts := strings.Split(id, ":")
		if len(parts) != 3 || parts[0] != "ensemble" || parts[1] == "" || len(parts[2]) != 36 {
			t.Errorf("provider turn id %q is not ensemble:<provider session>:<messageId>", id)
		}
	}
	if !strings.HasPrefix(newTurnID, "ensemble:"+again.ProviderSessionID+":") || oldTurnID == newTurnID {
		t.Errorf("provider turn ids %q then %q", oldTurnID, newTurnID)
	}
}

func TestResumeViaSessionLoad(t *testing.T) {
	rt := newSimRuntime(t)
	first := start(t, rt, "s1", "")
	sink := newSink(t)
	if err := dispatch(rt, ref("s1", "t1"), first.ProviderSessionID, "remember this", sink); err != nil {
		t.Fatal(err)
	}
	sink.waitTerminal(wait)

	// Start on a live session returns it.
	live := start(t, rt, "s1", first.ProviderSessionID)
	if live.Created || !live.Resumed || live.ProviderSessionID != first.ProviderSessionID {
		t.Fatalf("start on live session = %+v", live)
	}

	// A transport release (lease lost, shutdown) keeps the agent's
	// session: it can be loaded again with its history.
	if err := rt.Release(context.Background(), "ws1", "s1"); err != nil {
		t.Fatalf("release: %v", err)
	}
	resumed := start(t, rt, "s1", first.ProviderSessionID)
	if !resumed.Created || !resumed.Resumed || resumed.ProviderSessionID != first.ProviderSessionID {
		t.Fatalf("resume = %+v", resumed)
	}
	// The history the agent replayed during load is not Turn output; the
	// next prompt continues the same conversation.
	sink2 := newSink(t)
	if err := dispatch(rt, ref("s1", "t2"), resumed.ProviderSessionID, "and now?", sink2); err != nil {
		t.Fatal(err)
	}
	sink2.waitTerminal(wait)
	_, byKey := texts(sink2.snapshot())
	if strings.Contains(byKey["text-1"], "remember this") || strings.Contains(byKey["text-1"], "Hello!") {
		t.Errorf("second turn shows replayed or first-turn text: %q", byKey["text-1"])
	}
	if !strings.Contains(byKey["text-1"], "and now?") {
		t.Errorf("answer does not echo the prompt: %q", byKey["text-1"])
	}

	// A provider session the agent does not know is never replaced by a
	// fresh one silently: Start reports the lost context, and only a start
	// without a provider session id (the explicit choice) starts fresh.
	_, err := rt.Start(context.Background(), host.StartRequest{WorkspaceID: "ws1", SessionID: "s2", ProviderSessionID: "sim-unknown"})
	if !errors.Is(err, host.ErrContextLost) {
		t.Fatalf("start with an unknown provider session = %v, want ErrContextLost", err)
	}
	other := start(t, rt, "s2", "")
	if !other.Created || other.Resumed || other.ProviderSessionID == "" {
		t.Fatalf("fresh start = %+v", other)
	}

	// Destroy ends the binding and sends session/close (the sim agent
	// answers it for a session it knows, so a nil error proves it went).
	if err := rt.Destroy(context.Background(), "ws1", "s1"); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	var le *host.LocalError
	if err := dispatch(rt, ref("s1", "t3"), first.ProviderSessionID, "gone?", newSink(t)); !errors.As(err, &le) || le.Code != "session_not_started" {
		t.Fatalf("dispatch after destroy = %v", err)
	}
}

func TestDispatchRequiresStart(t *testing.T) {
	rt := newSimRuntime(t)
	err := dispatch(rt, ref("s1", "t1"), "", "hello", newSink(t))
	var pe *host.LocalError
	if !errors.As(err, &pe) || pe.Code != "session_not_started" {
		t.Fatalf("dispatch without start = %v", err)
	}
	start(t, rt, "s1", "")
	err = dispatch(rt, ref("s2", "t1"), "", "hello", newSink(t))
	if !errors.As(err, &pe) || pe.Code != "session_not_started" {
		t.Fatalf("dispatch to a session not started = %v", err)
	}
}

func TestFailedAcceptanceDropsOutput(t *testing.T) {
	for _, acceptErr := range []error{
		errors.New("store down"),
		&host.ProviderError{Code: "weird", Message: "a sink must not make this look like a rejection"},
	} {
		t.Run(acceptErr.Error(), func(t *testing.T) {
			rt := acp.New(acp.Config{
				Name: sim.Name, Simulated: true, Cwd: t.TempDir(), Logger: quietLogger(),
				Dial: sim.Dial(sim.Options{Rate: time.Millisecond, Logger: quietLogger()}),
			})
			st := start(t, rt, "s1", "")
			sink := newSink(t)
			sink.acceptErr = acceptErr
			err := dispatch(rt, ref("s1", "t1"), st.ProviderSessionID, "/sim words=30", sink)
			if err == nil {
				t.Fatal("dispatch succeeded although Accepted failed")
			}
			var pe *host.ProviderError
			if errors.As(err, &pe) {
				t.Fatalf("dispatch err is a ProviderError: %v", err)
			}
			if !strings.Contains(err.Error(), acceptErr.Error()) {
				t.Errorf("dispatch err %q does not carry the cause", err)
			}
			// Shutdown waits for every goroutine of the Turn.
			if err := rt.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, c := range sink.snapshot() {
				if c.kind == "output" || c.kind == "terminal" {
					t.Errorf("%s after failed acceptance: %s", c.kind, sink.dump())
				}
			}
		})
	}
}

func allText(calls []call) string {
	_, byKey := texts(calls)
	all := ""
	for _, v := range byKey {
		all += v
	}
	return all
}

func iref(r host.TurnRef, requestID string) host.InteractionRef {
	return host.InteractionRef{WorkspaceID: r.WorkspaceID, SessionID: r.SessionID, TurnID: r.TurnID, RequestID: requestID}
}

func option(req host.InteractionRequest, id string) host.InteractionOption {
	for _, o := range req.Options {
		if o.ID == id {
			return o
		}
	}
	return host.InteractionOption{}
}

// A permission request waits for the Host's answer, which reaches the agent
// exactly once however often the delivery is retried.
func TestPermissionWaitsForTheAnswer(t *testing.T) {
	rt := newSimRuntime(t)
	st := start(t, rt, "s1", "")
	sink := newSink(t)
	r := ref("s1", "t1")
	if err := dispatch(rt, r, st.ProviderSessionID, "/sim permission", sink); err != nil {
		t.Fatal(err)
	}
	ask := sink.waitAsk(wait)
	if ask.Kind != host.InteractionApproval || ask.Title != "Edit config.json (simulated)" || ask.RequestID == "" ||
		len(ask.Options) != 2 || ask.Tool == nil || ask.Tool.Kind != "edit" || !strings.Contains(string(ask.Tool.Input), "config.json") {
		t.Fatalf("interaction = %+v tool %+v", ask, ask.Tool)
	}
	// Nothing was answered yet: the turn is still running.
	select {
	case term := <-sink.terminal:
		t.Fatalf("the turn ended before the answer: %+v", term)
	default:
	}
	d := host.InteractionDelivery{Ref: iref(r, ask.RequestID), OperationID: "iop_test1", Kind: ask.Kind,
		Title: ask.Title, Option: option(ask, "allow"), AnsweredBy: "Alice"}
	rep, err := rt.RespondInteraction(context.Background(), d)
	if err != nil || rep.Result != host.DeliveryDelivered || rep.FollowUp != nil {
		t.Fatalf("deliver: %+v %v", rep, err)
	}
	again, err := rt.RespondInteraction(context.Background(), d)
	if err != nil || again.Result != host.DeliveryDelivered {
		t.Fatalf("a retried delivery answers from memory: %+v %v", again, err)
	}
	if term := sink.waitTerminal(wait); term.Outcome != host.OutcomeCompleted {
		t.Fatalf("terminal = %+v", term)
	}
	all := allText(sink.snapshot())
	if strings.Count(all, "Permission outcome:") != 1 || !strings.Contains(all, `selected "Allow this change" (allow)`) {
		t.Fatalf("the agent must see the chosen option once: %q", all)
	}
	// The request is over: another operation for it is superseded.
	other := d
	other.OperationID = "iop_test2"
	if rep, err := rt.RespondInteraction(context.Background(), other); err != nil || rep.Result != host.DeliverySuperseded {
		t.Fatalf("answer to an ended request: %+v %v", rep, err)
	}
}

// Cancelling the turn answers its pending request "cancelled" (as ACP
// requires); a denial that arrives afterwards comes back as a follow-up.
func TestPermissionCancelledWithTheTurn(t *testing.T) {
	rt := newSimRuntime(t)
	st := start(t, rt, "s1", "")
	sink := newSink(t)
	r := ref("s1", "t1")
	if err := dispatch(rt, r, st.ProviderSessionID, "/sim permission", sink); err != nil {
		t.Fatal(err)
	}
	ask := sink.waitAsk(wait)
	if rep, err := rt.Cancel(context.Background(), r); err != nil || !rep.Confirmed {
		t.Fatalf("cancel: %+v %v", rep, err)
	}
	if term := sink.waitTerminal(wait); term.Outcome != host.OutcomeCanceled {
		t.Fatalf("terminal = %+v; calls %s", term, sink.dump())
	}
	rep, err := rt.RespondInteraction(context.Background(), host.InteractionDelivery{Ref: iref(r, ask.RequestID),
		OperationID: "iop_late", Kind: ask.Kind, Title: ask.Title, Option: option(ask, "reject"),
		Payload: []byte(`{"message":"leave it"}`), AnsweredBy: "Bob"})
	if err != nil || rep.Result != host.DeliverySuperseded || rep.Reason != host.ResolutionProviderGone {
		t.Fatalf("late answer: %+v %v", rep, err)
	}
	if rep.FollowUp == nil || !strings.Contains(rep.FollowUp.Text, "Bob declined") || !strings.Contains(rep.FollowUp.Text, "leave it") {
		t.Fatalf("a denial that could not reach the request becomes a follow-up intent: %+v", rep.FollowUp)
	}
}

// A denial with a message: the agent gets the option, the message follows
// as a provider-neutral follow-up intent.
func TestPermissionDenialWithMessage(t *testing.T) {
	rt := newSimRuntime(t)
	st := start(t, rt, "s1", "")
	sink := newSink(t)
	r := ref("s1", "t1")
	if err := dispatch(rt, r, st.ProviderSessionID, "/sim permission", sink); err != nil {
		t.Fatal(err)
	}
	ask := sink.waitAsk(wait)
	rep, err := rt.RespondInteraction(context.Background(), host.InteractionDelivery{Ref: iref(r, ask.RequestID),
		OperationID: "iop_deny", Kind: ask.Kind, Title: ask.Title, Option: option(ask, "reject"),
		Payload: []byte(`{"message":"use the staging config"}`), AnsweredBy: "Bob"})
	if err != nil || rep.Result != host.DeliveryDelivered || rep.FollowUp == nil || !strings.Contains(rep.FollowUp.Text, "use the staging config") {
		t.Fatalf("deny: %+v %v", rep, err)
	}
	if term := sink.waitTerminal(wait); term.Outcome != host.OutcomeCompleted {
		t.Fatalf("terminal = %+v", term)
	}
	if all := allText(sink.snapshot()); !strings.Contains(all, `selected "Skip this change" (reject)`) {
		t.Fatalf("the agent must see the denial: %q", all)
	}
}

func TestShutdownReportsStateLost(t *testing.T) {
	rt := acp.New(acp.Config{
		Name: sim.Name, Simulated: true, Cwd: t.TempDir(), Logger: quietLogger(),
		Dial: sim.Dial(sim.Options{Logger: quietLogger()}),
	})
	st := start(t, rt, "s1", "")
	sink := newSink(t)
	if err := dispatch(rt, ref("s1", "t1"), st.ProviderSessionID, "/sim hang", sink); err != nil {
		t.Fatal(err)
	}
	if err := rt.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case term := <-sink.terminal:
		if !term.StateLost || term.StopReason != host.StopServerShutdown {
			t.Fatalf("a graceful shutdown is outcome unknown, marked as a planned restart: %+v", term)
		}
	default:
		t.Fatalf("Shutdown returned before the in-flight turn got its terminal: %s", sink.dump())
	}
	if _, err := rt.Start(context.Background(), host.StartRequest{WorkspaceID: "ws1", SessionID: "s1"}); !errors.Is(err, acp.ErrShutdown) {
		t.Fatalf("start after shutdown = %v", err)
	}
}

// silentHang is a sim agent that takes a prompt up without any output.
func silentHangRuntime(t *testing.T, window time.Duration) *acp.Runtime {
	return silentHangRuntimeOver(t, window, nil)
}

// silentHangRuntimeOver is silentHangRuntime with the agent's transport
// wrapped by wrap (nil: as is).
func silentHangRuntimeOver(t *testing.T, window time.Duration, wrap func(io.ReadWriteCloser) io.ReadWriteCloser) *acp.Runtime {
	t.Helper()
	dial := sim.Dial(sim.Options{Scenario: sim.Scenario{{Hang: true}}, Logger: quietLogger()})
	rt := acp.New(acp.Config{
		Name: sim.Name, Simulated: true, Cwd: t.TempDir(), Logger: quietLogger(), RejectionWindow: window,
		Dial: func(ctx context.Context) (io.ReadWriteCloser, error) {
			rwc, err := dial(ctx)
			if err != nil || wrap == nil {
				return rwc, err
			}
			return wrap(rwc), nil
		},
	})
	t.Cleanup(func() { _ = rt.Shutdown(context.Background()) })
	return rt
}

// dropFirstCancel loses the first session/cancel written to the agent, as
// an agent built on acp-go-sdk does when it reads the cancel before its
// prompt handler (a goroutine of its own) has registered the prompt.
type dropFirstCancel struct {
	io.ReadWriteCloser
	dropped atomic.Bool
}

func (d *dropFirstCancel) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(`"method":"session/cancel"`)) && d.dropped.CompareAndSwap(false, true) {
		return len(p), nil
	}
	return d.ReadWriteCloser.Write(p)
}

func TestInterruptedDispatchIsOutcomeUnknownAndCancelsPrompt(t *testing.T) {
	testInterruptedDispatch(t, silentHangRuntime(t, time.Hour))
}

// TestInterruptedDispatchCancelsAgainWhenACancelIsLost: the abandoned
// prompt is cancelled even when the agent lost the first cancel.
func TestInterruptedDispatchCancelsAgainWhenACancelIsLost(t *testing.T) {
	testInterruptedDispatch(t, silentHangRuntimeOver(t, time.Hour, func(rwc io.ReadWriteCloser) io.ReadWriteCloser {
		return &dropFirstCancel{ReadWriteCloser: rwc}
	}))
}

func testInterruptedDispatch(t *testing.T, rt *acp.Runtime) {
	st := start(t, rt, "s1", "")
	sink := newSink(t)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- rt.Dispatch(ctx, host.DispatchRequest{
			Ref: ref("s1", "t1"), ProviderSessionID: st.ProviderSessionID, ClientSubmitID: "c1",
			Content: host.MessageContent{Text: "wait for it"},
		}, sink)
	}()
	// Wait until the prompt is written, then give up on it.
	deadline := time.Now().Add(wait)
	for !hasPhase(sink.snapshot(), host.PhaseResolvingIdentity) {
		if time.Now().After(deadline) {
			t.Fatalf("prompt never written: %s", sink.dump())
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	err := <-errc
	var pe *host.ProviderError
	if err == nil || errors.As(err, &pe) || !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted dispatch = %v", err)
	}
	// The abandoned prompt was cancelled at the agent (its hang ends only
	// then), which frees the session for the next prompt.
	for {
		err := dispatch(rt, ref("s1", "t2"), st.ProviderSessionID, "/sim instant", newSink(t))
		if err == nil {
			break
		}
		var le *host.LocalError
		if !errors.As(err, &le) || le.Code != "session_busy" || time.Now().After(deadline) {
			t.Fatalf("dispatch after abandon = %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	for _, c := range sink.snapshot() {
		if c.kind != "observed" {
			t.Errorf("abandoned turn reported %s: %s", c.kind, sink.dump())
		}
	}
}

func TestAcceptsSilentAgentAfterRejectionWindow(t *testing.T) {
	rt := silentHangRuntime(t, 20*time.Millisecond)
	st := start(t, rt, "s1", "")
	sink := newSink(t)
	if err := dispatch(rt, ref("s1", "t1"), st.ProviderSessionID, "anything", sink); err != nil {
		t.Fatalf("dispatch: %v", err)
	}
	if rep, err := rt.Cancel(context.Background(), ref("s1", "t1")); err != nil || !rep.Confirmed {
		t.Fatalf("cancel = %+v, %v", rep, err)
	}
	if term := sink.waitTerminal(wait); term.Outcome != host.OutcomeCanceled {
		t.Fatalf("terminal = %+v", term)
	}
	checkBarrier(t, sink.snapshot())
}

func hasPhase(calls []call, p host.TurnPhase) bool {
	for _, c := range calls {
		if c.kind == "observed" && c.phase == p {
			return true
		}
	}
	return false
}

// slowTerminal fails the first Terminal as transient, then holds the next
// until released.
type slowTerminal struct {
	*recSink
	attempts atomic.Int32
	release  chan struct{}
}

func (s *slowTerminal) Terminal(ctx context.Context, term host.Terminal) error {
	if s.attempts.Add(1) == 1 {
		return fmt.Errorf("commit terminal: %w", host.ErrUnavailable)
	}
	<-s.release
	return s.recSink.Terminal(ctx, term)
}

func TestTerminalRetriedAndFenceHeldUntilRecorded(t *testing.T) {
	rt := newSimRuntime(t)
	st := start(t, rt, "s1", "")
	sink := &slowTerminal{recSink: newSink(t), release: make(chan struct{})}
	// Two words 20 ms apart: the prompt is still running at the acceptance
	// barrier, so its end comes through Terminal. (An instant answer's end
	// may ride with the acceptance instead, and Terminal is never called.)
	if err := dispatch(rt, ref("s1", "t1"), st.ProviderSessionID, "/sim words=2 rate=20ms\nhi", sink); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(wait)
	for sink.attempts.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("terminal not retried after a transient failure (attempts %d)", sink.attempts.Load())
		}
		time.Sleep(time.Millisecond)
	}
	// The prompt is over but its terminal is not recorded: the fence holds,
	// the finished Turn is no longer cancellable, and the next Dispatch
	// waits for the terminal instead of failing.
	if rep, err := rt.Cancel(context.Background(), ref("s1", "t1")); err != nil || rep.Confirmed {
		t.Fatalf("cancel of a finished turn = %+v, %v", rep, err)
	}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	err := rt.Dispatch(gone, host.DispatchRequest{Ref: ref("s1", "t2"), ProviderSessionID: st.ProviderSessionID,
		ClientSubmitID: "c2", Content: host.MessageContent{Text: "next"}}, newSink(t))
	var pe *host.ProviderError
	if !errors.Is(err, context.Canceled) || errors.As(err, &pe) {
		t.Fatalf("dispatch while the terminal is pending = %v, want it to wait", err)
	}
	next := make(chan error, 1)
	go func() { next <- dispatch(rt, ref("s1", "t2"), st.ProviderSessionID, "next", newSink(t)) }()
	close(sink.release)
	if term := sink.waitTerminal(wait); term.Outcome != host.OutcomeCompleted {
		t.Fatalf("terminal = %+v", term)
	}
	select {
	case err := <-next:
		if err != nil {
			t.Fatalf("dispatch after the terminal = %v", err)
		}
	case <-time.After(wait):
		t.Fatal("dispatch still waiting after the terminal was recorded")
	}
	if n := sink.attempts.Load(); n != 2 {
		t.Errorf("Terminal called %d times, want 2", n)
	}
}

// A sub-agent's own provider session becomes a child Turn: its output and
// its permission request go to the child, answered by its canonical ref.
func TestSubagentGetsItsOwnTurn(t *testing.T) {
	rt := newSimRuntime(t)
	st := start(t, rt, "s1", "")
	sink := newSink(t)
	r := ref("s1", "t1")
	if err := dispatch(rt, r, st.ProviderSessionID, "/sim subagent", sink); err != nil {
		t.Fatal(err)
	}
	var child *recSink
	select {
	case child = <-sink.children:
	case <-time.After(wait):
		t.Fatalf("no sub-agent; calls %s", sink.dump())
	}
	ask := child.waitAsk(wait)
	if ask.Title != "Sub-agent: edit review.md (simulated)" {
		t.Fatalf("child interaction = %+v", ask)
	}
	rep, err := rt.RespondInteraction(context.Background(), host.InteractionDelivery{Ref: iref(child.ref, ask.RequestID),
		OperationID: "iop_child", Kind: ask.Kind, Title: ask.Title, Option: option(ask, "allow"), AnsweredBy: "Alice"})
	if err != nil || rep.Result != host.DeliveryDelivered {
		t.Fatalf("answer the sub-agent: %+v %v", rep, err)
	}
	if term := sink.waitTerminal(wait); term.Outcome != host.OutcomeCompleted {
		t.Fatalf("parent terminal = %+v", term)
	}
	if term := child.waitTerminal(wait); term.Outcome != host.OutcomeCompleted {
		t.Fatalf("child terminal = %+v", term)
	}
	if got := allText(child.snapshot()); !strings.Contains(got, "Sub-agent here") || !strings.Contains(got, `selected "Allow this change"`) {
		t.Fatalf("child transcript %q", got)
	}
	if got := allText(sink.snapshot()); strings.Contains(got, "Sub-agent here") || !strings.Contains(got, "The sub-agent finished (completed)") {
		t.Fatalf("parent transcript %q", got)
	}
}

// Questions and plans are interactions of their own kind.
func TestQuestionAndPlanKinds(t *testing.T) {
	rt := newSimRuntime(t)
	st := start(t, rt, "s1", "")
	sink := newSink(t)
	r := ref("s1", "t1")
	if err := dispatch(rt, r, st.ProviderSessionID, "/sim question plan", sink); err != nil {
		t.Fatal(err)
	}
	q := sink.waitAsk(wait)
	if q.Kind != host.InteractionQuestion || q.Prompt == "" || len(q.Options) != 2 || q.Options[0].Name != "PostgreSQL" {
		t.Fatalf("question = %+v", q)
	}
	if _, err := rt.RespondInteraction(context.Background(), host.InteractionDelivery{Ref: iref(r, q.RequestID),
		OperationID: "iop_q", Option: q.Options[1]}); err != nil {
		t.Fatal(err)
	}
	p := sink.waitAsk(wait)
	if p.Kind != host.InteractionPlan || !strings.Contains(p.Prompt, "Switch the database host") {
		t.Fatalf("plan = %+v", p)
	}
	if _, err := rt.RespondInteraction(context.Background(), host.InteractionDelivery{Ref: iref(r, p.RequestID),
		OperationID: "iop_p", Option: option(p, "approve")}); err != nil {
		t.Fatal(err)
	}
	sink.waitTerminal(wait)
	if got := allText(sink.snapshot()); !strings.Contains(got, "you chose SQLite") || !strings.Contains(got, "Plan outcome: Approve the plan") {
		t.Fatalf("transcript %q", got)
	}
}

// An answer that ends while the acceptance reads the Turn goes with it
// through More: its words and its end, once, and the runtime reports
// nothing after the acceptance.
func TestAnswerDuringTheAcceptanceGoesWithIt(t *testing.T) {
	rt := newSimRuntime(t)
	st := start(t, rt, "s1", "")
	sink := newSink(t)
	sink.moreUntilEnd = true
	if err := dispatch(rt, ref("s1", "t1"), st.ProviderSessionID, "/sim words=3", sink); err != nil {
		t.Fatalf("dispatch: %v", err)
	}
	if term := sink.waitTerminal(wait); term.Outcome != host.OutcomeCompleted {
		t.Fatalf("terminal = %+v", term)
	}
	// The runtime is done with the Turn: the session takes the next prompt.
	if err := dispatch(rt, ref("s1", "t2"), st.ProviderSessionID, "/sim instant", newSink(t)); err != nil {
		t.Fatalf("next dispatch: %v", err)
	}
	calls := sink.snapshot()
	var text strings.Builder
	accepted := -1
	for i, c := range calls {
		switch c.kind {
		case "accepted":
			accepted = i
			if !c.heldTerminal {
				t.Fatalf("the acceptance did not take the terminal: %s", sink.dump())
			}
		case "output":
			text.WriteString(c.ev.Text)
		}
	}
	if accepted < 0 || calls[len(calls)-1].kind != "terminal" {
		t.Fatalf("calls: %s", sink.dump())
	}
	for _, c := range calls[accepted+1:] {
		if c.kind != "output" && c.kind != "terminal" {
			t.Fatalf("%s after the acceptance: %s", c.kind, sink.dump())
		}
	}
	if n := len(strings.Fields(text.String())); n != 3 {
		t.Fatalf("answer %q: %d words, want 3", text.String(), n)
	}
}

// TestCancelRepeatsWhenTheAgentLostIt: a Host cancel is confirmed once
// written, and the Host stops asking then; an agent that dropped it (read
// before its prompt handler registered the prompt) still gets the prompt
// cancelled, because the runtime repeats it until the prompt is over.
func TestCancelRepeatsWhenTheAgentLostIt(t *testing.T) {
	rt := acp.New(acp.Config{Name: sim.Name, Simulated: true, Cwd: t.TempDir(), Logger: quietLogger(),
		Dial: func(ctx context.Context) (io.ReadWriteCloser, error) {
			rwc, err := sim.Dial(sim.Options{Rate: time.Millisecond, Logger: quietLogger()})(ctx)
			if err != nil {
				return nil, err
			}
			return &dropFirstCancel{ReadWriteCloser: rwc}, nil
		}})
	t.Cleanup(func() { _ = rt.Shutdown(context.Background()) })
	st := start(t, rt, "s1", "")
	sink := newSink(t)
	if err := dispatch(rt, ref("s1", "t1"), st.ProviderSessionID, "/sim hang", sink); err != nil {
		t.Fatalf("dispatch: %v", err)
	}
	sink.waitOutput(wait, func(ev host.OutputEvent) bool { return strings.Contains(ev.Text, "hanging") })
	rep, err := rt.Cancel(context.Background(), ref("s1", "t1"))
	if err != nil || !rep.Confirmed {
		t.Fatalf("cancel = %+v, %v", rep, err)
	}
	if term := sink.waitTerminal(wait); term.Outcome != host.OutcomeCanceled {
		t.Fatalf("terminal = %+v, want canceled", term)
	}
}
