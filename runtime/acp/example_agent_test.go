package acp_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/runtime/acp"
)

// The real peer: the example agent of github.com/coder/acp-go-sdk, built
// from this module's go.mod. It streams two text chunks, a read tool call,
// more text and an edit tool call that asks permission; it sleeps about a
// second between steps and stops on session/cancel.
var (
	exampleOnce sync.Once
	examplePath string
	exampleErr  error
)

func exampleAgent(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the ACP SDK example agent (several seconds)")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not on PATH; cannot build the ACP example agent")
	}
	exampleOnce.Do(func() {
		dir, err := exampleDir()
		if err != nil {
			exampleErr = err
			return
		}
		examplePath = filepath.Join(dir, "acp-example-agent")
		cmd := exec.Command(goTool, "build", "-o", examplePath, "github.com/coder/acp-go-sdk/example/agent")
		cmd.Dir = filepath.Join("..", "..") // module root
		if out, err := cmd.CombinedOutput(); err != nil {
			exampleErr = &buildError{err: err, out: string(out)}
		}
	})
	if exampleErr != nil {
		t.Fatalf("build example agent: %v", exampleErr)
	}
	return examplePath
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.out }

// exampleDir is shared by the tests of this binary (see TestMain).
func exampleDir() (string, error) {
	return testDir, nil
}

func newExampleRuntime(t *testing.T) *acp.Runtime {
	t.Helper()
	bin := exampleAgent(t)
	rt := acp.New(acp.Config{
		Command: []string{bin},
		Cwd:     t.TempDir(),
		Logger:  quietLogger(),
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

func TestExampleAgentPrompt(t *testing.T) {
	t.Parallel()
	rt := newExampleRuntime(t)
	if got := rt.Describe(); got.Name != "acp-example-agent" || got.Simulated {
		t.Errorf("Describe = %+v", got)
	}
	// The example agent cannot load sessions: a resume request starts fresh.
	st := start(t, rt, "s1", "sess_from_before")
	if !st.Created || st.Resumed || st.ProviderSessionID == "sess_from_before" {
		t.Fatalf("start = %+v", st)
	}
	sink := newSink(t)
	r := ref("s1", "t1")
	if err := dispatch(rt, r, st.ProviderSessionID, "Hello, agent!", sink); err != nil {
		t.Fatalf("dispatch: %v", err)
	}
	// The permission request is shown with the agent's options and the
	// tool call's details; the agent waits until it is answered.
	ask := sink.waitAsk(30 * time.Second)
	if ask.Kind != host.InteractionApproval || ask.Title != "Modifying critical configuration file" || ask.RequestID != "call_2" ||
		len(ask.Options) != 2 || ask.Options[0].ID != "allow" || ask.Options[0].Kind != "allow_once" ||
		ask.Tool == nil || ask.Tool.Kind != "edit" || !strings.Contains(string(ask.Tool.Input), "config.json") {
		t.Fatalf("interaction = %+v tool %+v", ask, ask.Tool)
	}
	rep, err := rt.RespondInteraction(context.Background(), host.InteractionDelivery{
		Ref: iref(r, ask.RequestID), OperationID: "iop_example", Kind: ask.Kind, Title: ask.Title,
		Option: option(ask, "allow"), AnsweredBy: "Alice"})
	if err != nil || rep.Result != host.DeliveryDelivered {
		t.Fatalf("answer: %+v %v", rep, err)
	}
	term := sink.waitTerminal(30 * time.Second)
	if term != (host.Terminal{Outcome: host.OutcomeCompleted, StopReason: "end_turn"}) {
		t.Fatalf("terminal = %+v; calls: %s", term, sink.dump())
	}
	calls := sink.snapshot()
	checkBarrier(t, calls)
	keys, byKey := texts(calls)

	if !strings.HasPrefix(byKey["text-1"], "ACP Go Example Agent") || !strings.Contains(byKey["text-1"], "reading some files") {
		t.Errorf("text-1 = %q", byKey["text-1"])
	}
	if !strings.Contains(byKey["text-2"], "Now I understand the project structure") {
		t.Errorf("text-2 = %q", byKey["text-2"])
	}
	// Transcript order: text, tool, text, the permission-gated tool, then
	// the agent's reply to the answer.
	pos := map[string]int{}
	for i, k := range keys {
		pos[k] = i
	}
	for _, k := range []string{"text-1", "tool-call_1", "text-2", "tool-call_2", "text-3"} {
		if _, ok := pos[k]; !ok {
			t.Fatalf("missing message %s; keys %v; calls: %s", k, keys, sink.dump())
		}
	}
	if !(pos["text-1"] < pos["tool-call_1"] && pos["tool-call_1"] < pos["text-2"] && pos["text-2"] < pos["tool-call_2"] && pos["tool-call_2"] < pos["text-3"]) {
		t.Errorf("message order = %v", keys)
	}
	// The agent continued with the chosen option.
	if !strings.Contains(byKey["text-3"], "successfully updated the configuration") {
		t.Errorf("text-3 = %q", byKey["text-3"])
	}

	last := map[string]host.OutputEvent{}
	for _, c := range calls {
		if c.kind == "output" {
			last[c.ev.Key] = c.ev
		}
	}
	read := last["tool-call_1"]
	if read.Tool == nil || read.Tool.Status != "completed" || read.Tool.Kind != "read" || read.Tool.Title != "Reading project files" ||
		!strings.Contains(read.Tool.Output, "# My Project") || !strings.Contains(string(read.Tool.Input), "/project/README.md") || !read.Done {
		t.Errorf("tool call_1 = %+v %+v", read, read.Tool)
	}
	edit := last["tool-call_2"]
	if edit.Tool == nil || edit.Tool.Kind != "edit" || edit.Tool.Status != "completed" || !edit.Done {
		t.Errorf("tool call_2 = %+v %+v (allowed, it completes)", edit, edit.Tool)
	}
	for _, k := range []string{"text-1", "text-2", "text-3"} {
		if !last[k].Done {
			t.Errorf("%s not marked done", k)
		}
	}
}

func TestExampleAgentCancel(t *testing.T) {
	t.Parallel()
	rt := newExampleRuntime(t)
	st := start(t, rt, "s1", "")
	sink := newSink(t)
	if err := dispatch(rt, ref("s1", "t1"), st.ProviderSessionID, "Hello, agent!", sink); err != nil {
		t.Fatalf("dispatch: %v", err)
	}
	sink.waitOutput(10*time.Second, func(ev host.OutputEvent) bool { return strings.Contains(ev.Text, "ACP Go Example Agent") })
	rep, err := rt.Cancel(context.Background(), ref("s1", "t1"))
	if err != nil || !rep.Confirmed {
		t.Fatalf("cancel = %+v, %v", rep, err)
	}
	term := sink.waitTerminal(10 * time.Second)
	if term != (host.Terminal{Outcome: host.OutcomeCanceled, StopReason: "cancelled"}) {
		t.Fatalf("terminal = %+v; calls: %s", term, sink.dump())
	}
	checkBarrier(t, sink.snapshot())
}
