package acp_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/runtime/acp"
)

// The ACP SDK's example agent does not advertise session/fork (it answers
// method-not-found): before it connected the capability is unknown, after
// it connected fork is refused with a stable reason and nothing is sent.
func TestExampleAgentForkIsUnattested(t *testing.T) {
	rt := acp.New(acp.Config{Command: []string{exampleAgent(t)}, Cwd: t.TempDir()})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = rt.Shutdown(ctx)
	})
	if mode, reason := rt.ForkCapability(); mode != host.ForkNone || reason != host.ReasonForkAgentUnknown {
		t.Fatalf("before connecting: %q %q", mode, reason)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := rt.Start(ctx, host.StartRequest{WorkspaceID: "w", SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if mode, reason := rt.ForkCapability(); mode != host.ForkNone || reason != host.ReasonForkUnsupported {
		t.Fatalf("after connecting: %q %q", mode, reason)
	}
	_, err = rt.Fork(ctx, host.ForkRequest{WorkspaceID: "w", SourceSessionID: "s", TargetSessionID: "t",
		ProviderSessionID: st.ProviderSessionID, ThroughProviderTurnID: "ensemble:" + st.ProviderSessionID + ":m", Latest: true})
	var le *host.LocalError
	if !errors.As(err, &le) || le.Code != host.ReasonForkUnsupported {
		t.Fatalf("fork: %v", err)
	}
}
