// Package sqlstoretest holds the test fixtures both SQL stores' tests share:
// the sim runtime their conformance drivers hand out and the checks that a
// database migrated from the first schema still serves its data. Only
// tests import it.
package sqlstoretest

import (
	"context"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/runtime/acp"
	"github.com/ensemble-dev/ensemble/runtime/sim"
)

// RuntimeForking is the sim agent advertising through-turn fork, only ACP
// session/fork, or no fork (conformance.Driver.NewRuntimeForking).
func RuntimeForking(t *testing.T, mode host.ForkMode) host.Runtime {
	support := map[host.ForkMode]sim.ForkSupport{host.ForkAnyTurn: sim.ForkThroughTurn,
		host.ForkLatestTurn: sim.ForkWholeSession, host.ForkNone: sim.ForkOff}[mode]
	rt := acp.New(acp.Config{Name: sim.Name, Simulated: true,
		Dial: sim.Dial(sim.Options{Rate: time.Millisecond, Fork: support})})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Shutdown(ctx)
	})
	return rt
}

// CheckFirstSchemaRows reads back, through the store, the rows the
// upgrade tests write under the first schema (a session with a settled
// and an unsettled turn, their claims and messages, and one pending
// outbox row among published ones), and returns the pending row.
func CheckFirstSchemaRows(t *testing.T, st host.Store, now time.Time) host.OutboxRow {
	t.Helper()
	ctx := t.Context()
	s, err := st.GetSession(ctx, "w", "s")
	if err != nil || s.Title != "old session" || s.Settings["model"] != "m" || s.TurnCount != 2 || s.ActiveTurnID != "t2" {
		t.Fatalf("session after upgrade: %+v %v", s, err)
	}
	c, err := st.GetClaim(ctx, "w", "c1")
	if err != nil || c.Content.Text != "first" || c.State != host.ClaimAccepted {
		t.Fatalf("claim after upgrade: %+v %v", c, err)
	}
	msgs, err := st.ListMessages(ctx, "w", "s", host.MessageQuery{})
	if err != nil || len(msgs.Messages) != 3 || msgs.Messages[1].Content.Text != "answer" {
		t.Fatalf("messages after upgrade: %+v %v", msgs, err)
	}
	pending, err := st.PendingFacts(ctx, now, 100)
	if err != nil || len(pending) != 1 || pending[0].Fact.Version != 3 {
		t.Fatalf("pending facts after upgrade: %+v %v", pending, err)
	}
	return pending[0]
}

// CheckHostServesFirstSchema runs a Host on the upgraded store: recovery
// settles the old unsettled turn, a new prompt on the old session
// completes, and an old claim still guards its ClientSubmitID.
func CheckHostServesFirstSchema(t *testing.T, h *host.Host) {
	t.Helper()
	ctx := t.Context()
	rep, err := h.Recover(ctx)
	if err != nil || len(rep.SettledTurns) != 1 || rep.SettledTurns[0].TurnID != "t2" {
		t.Fatalf("recovery on the upgraded database: %+v %v", rep, err)
	}
	r, err := h.SendInput(ctx, host.SendInput{WorkspaceID: "w", SessionID: "s", ClientSubmitID: "c3",
		Content: host.MessageContent{Text: "third"}, SubmittedBy: "alice"})
	if err != nil || r.Turn.Seq != 3 {
		t.Fatalf("submit on the upgraded session: %+v %v", r, err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		tu, err := h.GetTurn(ctx, "w", "s", r.Turn.ID)
		if err == nil && tu.Settled() {
			if tu.Outcome != host.OutcomeCompleted {
				t.Fatalf("turn on the upgraded session: %+v", tu)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("turn on the upgraded session never settled: %+v %v", tu, err)
		}
	}
	if _, err := h.SendInput(ctx, host.SendInput{WorkspaceID: "w", SessionID: "s", ClientSubmitID: "c1",
		Content: host.MessageContent{Text: "first"}}); host.CodeOf(err) != host.CodeOperationConflict {
		t.Fatalf("a v1 claim no longer guards its ClientSubmitID: %v", err)
	}
}
