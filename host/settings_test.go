package host_test

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/runtime/acp"
	"github.com/ensemble-dev/ensemble/runtime/sim"
)

// settingsRuntime records which replica's runtime accepted settings.
type settingsRuntime struct {
	*acp.Runtime
	updates atomic.Int64
}

func (r *settingsRuntime) UpdateSettings(ctx context.Context, ws, sid string, s map[string]string) error {
	r.updates.Add(1)
	return r.Runtime.UpdateSettings(ctx, ws, sid, s)
}

func settingsReplica(t *testing.T, store host.Store, fwd *memForwarder, root string) (*host.Host, *settingsRuntime) {
	t.Helper()
	rt := &settingsRuntime{Runtime: acp.New(acp.Config{Name: sim.Name, Simulated: true, Dial: sim.Dial(sim.Options{Rate: time.Millisecond})})}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Shutdown(ctx)
	})
	h := host.New(host.Config{Store: store, Runtime: rt, WorkspaceRoot: root,
		Cluster: &host.ClusterConfig{Forwarder: fwd, LeaseTTL: time.Minute}})
	fwd.add(h)
	if _, err := h.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	return h, rt
}

// A settings change that reaches a replica which does not run the session
// is applied by the owner's runtime first, then saved; a bad directory is
// refused before anything is forwarded.
func TestSettingsChangeRunsOnTheOwner(t *testing.T) {
	ctx := context.Background()
	root, err := host.ResolveWorkspaceRoot(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "proj"), 0o755); err != nil {
		t.Fatal(err)
	}
	store := openStore(t)
	fwd := &memForwarder{}
	a, rtA := settingsReplica(t, store, fwd, root)
	b, rtB := settingsReplica(t, store, fwd, root)
	res, err := a.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: "w"})
	if err != nil {
		t.Fatal(err)
	}
	sid := res.Session.ID
	r := submit(t, a, sid, "s-1", "/sim instant\nhello")
	waitTurn(t, a, "w", sid, r.Turn.ID, settled)

	bad := map[string]string{"cwd": "/"}
	_, err = b.UpdateSession(ctx, host.UpdateSessionInput{WorkspaceID: "w", SessionID: sid, Settings: &bad})
	if host.CodeOf(err) != host.CodeInvalidInput || fwd.calls.Load() != 0 {
		t.Fatalf("outside the root: %v (forwarded %d)", err, fwd.calls.Load())
	}
	good := map[string]string{"cwd": "proj"}
	s, err := b.UpdateSession(ctx, host.UpdateSessionInput{WorkspaceID: "w", SessionID: sid, Settings: &good})
	if err != nil || s.Settings["cwd"] != filepath.Join(root, "proj") {
		t.Fatalf("update via the other replica: %+v %v", s.Settings, err)
	}
	if fwd.calls.Load() != 1 || rtA.updates.Load() != 1 || rtB.updates.Load() != 0 {
		t.Fatalf("forwarded %d, owner runtime %d, other runtime %d", fwd.calls.Load(), rtA.updates.Load(), rtB.updates.Load())
	}
	// The owner's agent reloads the session with the new directory and
	// still remembers it.
	r = submit(t, b, sid, "s-2", "/sim recall")
	if tr := waitTurn(t, a, "w", sid, r.Turn.ID, settled); tr.Outcome != host.OutcomeCompleted {
		t.Fatalf("turn after the change: %s/%s", tr.Outcome, tr.FailureReason)
	}
	if got, _ := a.GetSession(ctx, "w", sid); got.Settings["cwd"] != filepath.Join(root, "proj") {
		t.Fatalf("persisted settings: %+v", got.Settings)
	}
}

// A fork asked of a replica that does not run the source is made by the
// owner's agent, which holds the provider session.
func TestForkRunsOnTheOwner(t *testing.T) {
	ctx := context.Background()
	store := openStore(t)
	fwd := &memForwarder{}
	a, _ := settingsReplica(t, store, fwd, "")
	b, _ := settingsReplica(t, store, fwd, "")
	res, err := a.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: "w", Title: "Src"})
	if err != nil {
		t.Fatal(err)
	}
	sid := res.Session.ID
	r := submit(t, a, sid, "f-1", "/sim instant\nhello")
	waitTurn(t, a, "w", sid, r.Turn.ID, settled)
	s, err := b.ForkSession(ctx, host.ForkSessionInput{WorkspaceID: "w", SessionID: sid, TurnID: r.Turn.ID, ClientSubmitID: "fk-1"})
	if err != nil || s.Title != "Src (2)" || fwd.calls.Load() != 1 {
		t.Fatalf("fork via the other replica: %+v %v (forwarded %d)", s, err, fwd.calls.Load())
	}
	// The new provider session lives in the owner's agent (these sims
	// keep sessions in memory, one per replica): a prompt there runs.
	r = submit(t, a, s.ID, "f-2", "/sim recall")
	if tr := waitTurn(t, a, "w", s.ID, r.Turn.ID, settled); tr.Outcome != host.OutcomeCompleted {
		t.Fatalf("prompt in the fork: %s/%s", tr.Outcome, tr.FailureReason)
	}
}
