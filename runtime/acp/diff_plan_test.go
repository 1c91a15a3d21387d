package acp_test

import (
	"context"
	"strings"
	"testing"

	"github.com/ensemble-dev/ensemble/host"
)

// ACP diff content reaches the host as structured diffs (old and new
// text), on the tool call and on the approval that asks for it; a plan
// that progresses is reported once per update, so the GUI can show the
// latest state of the checklist.
func TestDiffsAndPlanUpdates(t *testing.T) {
	rt := newSimRuntime(t)
	st := start(t, rt, "s1", "")
	sink := newSink(t)
	r := ref("s1", "t1")
	if err := dispatch(rt, r, st.ProviderSessionID, "/sim diff checklist instant", sink); err != nil {
		t.Fatal(err)
	}
	ask := sink.waitAsk(wait)
	if ask.Tool == nil || len(ask.Tool.Diffs) != 1 || ask.Tool.Diffs[0].Path != "config.json" ||
		ask.Tool.Diffs[0].OldText == nil || !strings.Contains(*ask.Tool.Diffs[0].OldText, "sqlite") ||
		!strings.Contains(ask.Tool.Diffs[0].NewText, "postgres") {
		t.Fatalf("approval without its diff: %+v", ask.Tool)
	}
	d := host.InteractionDelivery{Ref: iref(r, ask.RequestID), OperationID: "iop_diff", Kind: ask.Kind,
		Title: ask.Title, Option: option(ask, "allow"), AnsweredBy: "Alice"}
	if _, err := rt.RespondInteraction(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if term := sink.waitTerminal(wait); term.Outcome != host.OutcomeCompleted {
		t.Fatalf("terminal = %+v", term)
	}
	var edit *host.ToolCall
	var plans []string
	for _, c := range sink.snapshot() {
		if c.kind != "output" {
			continue
		}
		if c.ev.Tool != nil && c.ev.Tool.Kind == "edit" && len(c.ev.Tool.Diffs) > 0 {
			edit = c.ev.Tool
		}
		if c.ev.Kind == host.KindNotice && strings.HasPrefix(c.ev.Text, "Plan:") {
			plans = append(plans, c.ev.Text)
		}
	}
	if edit == nil || edit.Diffs[0].Path != "main.go" || !strings.Contains(edit.Diffs[0].NewText, "fmt.Println") ||
		strings.Contains(edit.Output, "fmt.Println") {
		t.Fatalf("edit tool call: %+v", edit)
	}
	// pending, then in progress and completed for each of three entries.
	if len(plans) != 7 || !strings.Contains(plans[0], "- [ ] Read config.json") || strings.Contains(plans[6], "[ ]") ||
		strings.Count(plans[6], "- [x]") != 3 {
		t.Fatalf("plan updates: %q", plans)
	}
}
