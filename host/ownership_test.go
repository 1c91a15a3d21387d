package host_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/runtime/acp"
	"github.com/ensemble-dev/ensemble/runtime/sim"
	"github.com/ensemble-dev/ensemble/sqlite"
)

// memForwarder connects Hosts in one process the way the Redis router
// connects replicas.
type memForwarder struct {
	mu    sync.Mutex
	hosts map[string]*host.Host
	calls atomic.Int64
}

func (f *memForwarder) add(h *host.Host) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hosts == nil {
		f.hosts = map[string]*host.Host{}
	}
	f.hosts[h.Epoch()] = h
}

func (f *memForwarder) Forward(ctx context.Context, owner string, req host.ForwardRequest) (host.ForwardReply, error) {
	f.mu.Lock()
	h := f.hosts[owner]
	f.mu.Unlock()
	if h == nil {
		return host.ForwardReply{}, host.ErrNotDelivered
	}
	f.calls.Add(1)
	return h.ServeForwarded(ctx, req), nil
}

// countingRuntime counts provider dispatches.
type countingRuntime struct {
	host.Runtime
	dispatches, responses atomic.Int64
}

func (r *countingRuntime) Dispatch(ctx context.Context, req host.DispatchRequest, sink host.TurnSink) error {
	r.dispatches.Add(1)
	return r.Runtime.Dispatch(ctx, req, sink)
}

// RespondInteraction counts answers delivered to this runtime.
func (r *countingRuntime) RespondInteraction(ctx context.Context, d host.InteractionDelivery) (host.DeliveryReport, error) {
	r.responses.Add(1)
	return r.Runtime.RespondInteraction(ctx, d)
}

func newReplica(t *testing.T, store host.Store, fwd *memForwarder, ttl time.Duration) (*host.Host, *countingRuntime) {
	t.Helper()
	rt := acp.New(acp.Config{Name: sim.Name, Simulated: true, Dial: sim.Dial(sim.Options{Rate: time.Millisecond})})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Shutdown(ctx)
	})
	cr := &countingRuntime{Runtime: rt}
	h := host.New(host.Config{Store: store, Runtime: cr, Cluster: &host.ClusterConfig{Forwarder: fwd, LeaseTTL: ttl}})
	fwd.add(h)
	if _, err := h.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	return h, cr
}

func openStore(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "e.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func waitTurn(t *testing.T, h *host.Host, ws, sid, turnID string, done func(host.Turn) bool) host.Turn {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		tr, err := h.GetTurn(context.Background(), ws, sid, turnID)
		if err == nil && done(tr) {
			return tr
		}
		if time.Now().After(deadline) {
			t.Fatalf("turn %s: %+v %v", turnID, tr, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func settled(tr host.Turn) bool { return tr.Settled() }

func submit(t *testing.T, h *host.Host, sid, id, text string) host.SendResult {
	t.Helper()
	r, err := h.SendInput(context.Background(), host.SendInput{WorkspaceID: "w", SessionID: sid,
		ClientSubmitID: id, Content: host.MessageContent{Text: text}, SubmittedBy: "u"})
	if err != nil {
		t.Fatalf("submit %s: %v", id, err)
	}
	return r
}

// A command reaching a replica that does not own the session is run by the
// owner's runtime and answered as if local.
func TestNonOwnerForwardsToOwner(t *testing.T) {
	st := openStore(t)
	fwd := &memForwarder{}
	a, rtA := newReplica(t, st, fwd, time.Hour)
	b, rtB := newReplica(t, st, fwd, time.Hour)
	ctx := context.Background()
	cr, err := a.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: "w"})
	if err != nil {
		t.Fatal(err)
	}
	sid := cr.Session.ID

	r1 := submit(t, a, sid, "c1", "/sim words=3")
	waitTurn(t, a, "w", sid, r1.Turn.ID, settled)
	if owner, _ := b.Owner(ctx, "w", sid); owner != a.Epoch() {
		t.Fatalf("owner %q, want A %q", owner, a.Epoch())
	}

	r2 := submit(t, b, sid, "c2", "/sim words=3")
	if r2.Replayed || r2.Turn == nil || r2.Disposition != host.DispositionTurnStarted {
		t.Fatalf("forwarded submit: %+v", r2)
	}
	waitTurn(t, b, "w", sid, r2.Turn.ID, settled)
	if rtA.dispatches.Load() != 2 || rtB.dispatches.Load() != 0 || fwd.calls.Load() != 1 {
		t.Fatalf("dispatches A=%d B=%d forwards=%d", rtA.dispatches.Load(), rtB.dispatches.Load(), fwd.calls.Load())
	}
	// A retry on the non-owner is answered from the claim, with no dispatch.
	if again := submit(t, b, sid, "c2", "/sim words=3"); !again.Replayed || again.Turn.ID != r2.Turn.ID {
		t.Fatalf("replay: %+v", again)
	}
	// A command for a session that does not exist takes no lease.
	if _, err := b.SendInput(ctx, host.SendInput{WorkspaceID: "w", SessionID: "ses_none", ClientSubmitID: "c9",
		Content: host.MessageContent{Text: "x"}, SubmittedBy: "u"}); host.CodeOf(err) != host.CodeNotFound {
		t.Fatalf("submit to a missing session: %v", err)
	}
	if _, err := st.GetLease(ctx, "w", "ses_none"); !errors.Is(err, host.ErrNotFound) {
		t.Fatalf("a missing session got a lease: %v", err)
	}
	// A conflict found by the owner comes back typed.
	_, err = b.SendInput(ctx, host.SendInput{WorkspaceID: "w", SessionID: sid, ClientSubmitID: "c3",
		Content: host.MessageContent{Text: "x"}, Placement: host.PlacementCurrentTurn, TurnID: "nope", SubmittedBy: "u"})
	if host.CodeOf(err) != host.CodeNotDispatched {
		t.Fatalf("forwarded error: %v", err)
	}

	// Cancel from the non-owner stops the turn on the owner's runtime.
	long := submit(t, b, sid, "c4", "/sim words=5000 rate=5ms")
	waitTurn(t, a, "w", sid, long.Turn.ID, func(tr host.Turn) bool { return tr.Phase == host.PhaseDurablyAccepted })
	res, err := b.CancelTurn(ctx, host.CancelInput{WorkspaceID: "w", SessionID: sid, TurnID: long.Turn.ID, Wait: 10 * time.Second})
	if err != nil || !res.IntentAccepted || !res.ProviderConfirmed || !res.Settled || res.Turn.Outcome != host.OutcomeCanceled {
		t.Fatalf("forwarded cancel: %+v %v", res, err)
	}
	if rtB.dispatches.Load() != 0 {
		t.Fatal("the non-owner dispatched")
	}
}

// The owner dies (stops renewing): the next command on another replica
// takes the session over, settles the dead owner's turn without guessing,
// runs the new prompt itself, and the stale owner's writes are fenced out.
func TestExpiredOwnerIsTakenOver(t *testing.T) {
	st := openStore(t)
	fwd := &memForwarder{}
	const ttl = 300 * time.Millisecond
	a, rtA := newReplica(t, st, fwd, ttl)
	b, rtB := newReplica(t, st, fwd, ttl)
	ctx := context.Background()
	cr, err := a.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: "w"})
	if err != nil {
		t.Fatal(err)
	}
	sid := cr.Session.ID
	// The stale agent would stream on until shutdown; stop it at the end.
	defer rtA.Release(context.Background(), "w", sid)
	old := submit(t, a, sid, "old", "/sim words=100000 rate=10ms")
	waitTurn(t, a, "w", sid, old.Turn.ID, func(tr host.Turn) bool { return tr.Phase == host.PhaseDurablyAccepted })

	// A never renews (its RunOwnership does not run): once the lease
	// lapses, A counts as dead, though its agent keeps streaming.
	for {
		l, err := st.GetLease(ctx, "w", sid)
		if err != nil {
			t.Fatal(err)
		}
		if !l.Live {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// B is alive: it renews what it holds.
	bctx, bcancel := context.WithCancel(ctx)
	bDone := make(chan struct{})
	go func() { defer close(bDone); b.RunOwnership(bctx) }()
	defer func() { bcancel(); <-bDone }()
	// B's agent never saw the session: B says so instead of starting over
	// silently, and the explicit choice sends the queued prompt.
	in := host.SendInput{WorkspaceID: "w", SessionID: sid, ClientSubmitID: "next",
		Content: host.MessageContent{Text: "/sim words=3"}}
	if _, err := b.SendInput(ctx, in); host.CodeOf(err) != host.CodeNotDispatched {
		t.Fatalf("submit after takeover: %v, want not_dispatched/context_lost", err)
	}
	if s, err := b.ContinueFresh(ctx, host.ContinueFreshInput{WorkspaceID: "w", SessionID: sid}); err != nil || s.ContextLost {
		t.Fatalf("continue fresh: %+v %v", s, err)
	}
	next, err := b.SendInput(ctx, in)
	if err != nil || !next.Replayed || next.Turn == nil {
		t.Fatalf("retry after continuing fresh: %+v %v", next, err)
	}
	tr, err := b.GetTurn(ctx, "w", sid, old.Turn.ID)
	if err != nil || tr.Outcome != host.OutcomeFailed || tr.FailureReason != host.ReasonExecutionStatusUnknown {
		t.Fatalf("the dead owner's turn: %+v %v", tr, err)
	}
	waitTurn(t, b, "w", sid, next.Turn.ID, settled)
	if rtB.dispatches.Load() != 1 {
		t.Fatalf("B dispatched %d times", rtB.dispatches.Load())
	}
	l, err := st.GetLease(ctx, "w", sid)
	if err != nil || l.Owner != b.Epoch() || l.Generation != 2 {
		t.Fatalf("lease after takeover: %+v %v", l, err)
	}

	// A's agent is still streaming the old turn: nothing of it lands.
	before := agentText(t, b, sid, old.Turn.ID)
	time.Sleep(100 * time.Millisecond) // A's sim emits a chunk every 10ms
	if after := agentText(t, b, sid, old.Turn.ID); after != before {
		t.Fatalf("the stale owner's output became canonical after the takeover: %d → %d bytes", len(before), len(after))
	}
	// Once A runs its lease loop again it learns it lost the session and
	// closes its runtime there (the stream stops).
	octx, cancel := context.WithCancel(ctx)
	loopDone := make(chan struct{})
	go func() { defer close(loopDone); a.RunOwnership(octx) }()
	defer func() { cancel(); <-loopDone }()

	// A command on A now goes to B.
	calls := fwd.calls.Load()
	r := submit(t, a, sid, "via-a", "/sim words=3")
	waitTurn(t, a, "w", sid, r.Turn.ID, settled)
	if fwd.calls.Load() != calls+1 || rtB.dispatches.Load() != 2 {
		t.Fatalf("A did not forward to the new owner: forwards %d→%d, B dispatches %d", calls, fwd.calls.Load(), rtB.dispatches.Load())
	}
}

func agentText(t *testing.T, h *host.Host, sid, turnID string) string {
	t.Helper()
	p, err := h.ListSessionMessages(context.Background(), "w", sid, host.MessageQuery{TurnID: turnID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var s string
	for _, m := range p.Messages {
		if m.Role == host.RoleAgent {
			s += m.Content.Text
		}
	}
	return s
}

// Without a Forwarder nothing is leased: several Hosts on one store behave
// as before ownership existed.
func TestNoForwarderNoLeases(t *testing.T) {
	st := openStore(t)
	rt := acp.New(acp.Config{Name: sim.Name, Simulated: true, Dial: sim.Dial(sim.Options{Rate: time.Millisecond})})
	defer rt.Shutdown(context.Background())
	h := host.New(host.Config{Store: st, Runtime: rt})
	if _, err := h.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	cr, err := h.CreateSession(context.Background(), host.CreateSessionInput{WorkspaceID: "w"})
	if err != nil {
		t.Fatal(err)
	}
	r := submit(t, h, cr.Session.ID, "c1", "/sim words=3")
	waitTurn(t, h, "w", cr.Session.ID, r.Turn.ID, settled)
	if _, err := st.GetLease(context.Background(), "w", cr.Session.ID); !errors.Is(err, host.ErrNotFound) {
		t.Fatalf("a lease was taken without cluster mode: %v", err)
	}
}

// An answer to the agent's permission request given on a replica that does
// not own the session is delivered by the owner, whose runtime holds the
// request, and the turn goes on there.
func TestInteractionAnswerOnNonOwnerIsDeliveredByOwner(t *testing.T) {
	st := openStore(t)
	fwd := &memForwarder{}
	a, rtA := newReplica(t, st, fwd, time.Hour)
	b, rtB := newReplica(t, st, fwd, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, h := range []*host.Host{a, b} {
		wg.Go(func() { _ = h.Run(ctx) })
	}
	defer func() { cancel(); wg.Wait() }()

	cr, err := a.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: "w"})
	if err != nil {
		t.Fatal(err)
	}
	sid := cr.Session.ID
	r := submit(t, a, sid, "ask", "/sim permission")
	var pending host.Interaction
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		tree, err := b.GetSessionInteractionTreeSnapshot(ctx, "w", sid)
		if err == nil && len(tree.Pending()) == 1 {
			pending = tree.Pending()[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pending interaction: %+v %v", tree, err)
		}
	}
	ref := host.InteractionRef{WorkspaceID: "w", SessionID: sid, TurnID: pending.TurnID, RequestID: pending.RequestID}
	res, err := b.RespondInteraction(ctx, host.RespondInput{Ref: ref, Response: host.InteractionResponse{OptionID: "allow"}, RespondedBy: "u"})
	if err != nil || res.Disposition != host.DispositionAnswered {
		t.Fatalf("respond on B: %+v %v", res, err)
	}
	tr := waitTurn(t, a, "w", sid, r.Turn.ID, settled)
	if tr.Outcome != host.OutcomeCompleted {
		t.Fatalf("turn: %+v", tr)
	}
	if rtA.responses.Load() != 1 || rtB.responses.Load() != 0 {
		t.Fatalf("answers delivered: owner %d, other replica %d", rtA.responses.Load(), rtB.responses.Load())
	}
}

// A cluster whose replicas would not fence each other's writes is refused
// at construction, not discovered as a split brain.
func TestOpenRefusesClusterWithoutLeaseFencing(t *testing.T) {
	st := openStore(t)
	for name, c := range map[string]*host.ClusterConfig{
		"no forwarder":  {LeaseTTL: time.Second},
		"negative ttl":  {Forwarder: &memForwarder{}, LeaseTTL: -time.Second},
		"too short ttl": {Forwarder: &memForwarder{}, LeaseTTL: time.Millisecond},
	} {
		if h, err := host.Open(host.Config{Store: st, Runtime: describeOnly{}, Cluster: c}); err == nil || h != nil {
			t.Errorf("%s: Open = %v, %v; want an error", name, h, err)
		}
	}
	if _, err := host.Open(host.Config{Runtime: describeOnly{}}); err == nil {
		t.Error("Open without a store succeeded")
	}
	if _, err := host.Open(host.Config{Store: st, Runtime: describeOnly{},
		Cluster: &host.ClusterConfig{Forwarder: &memForwarder{}}}); err != nil {
		t.Errorf("a valid cluster config: %v", err)
	}
}

// wrappedStore is a decorator of the kind tests and tools write: it
// embeds host.Store and wraps each Tx. Before leases were part of Store and
// Tx, a wrapper like this silently turned lease fencing off.
type wrappedStore struct{ host.Store }

type wrappedTx struct{ host.Tx }

func (s wrappedStore) Update(ctx context.Context, fn func(host.Tx) error) error {
	return s.Store.Update(ctx, func(tx host.Tx) error { return fn(wrappedTx{tx}) })
}

// A replica behind a Store wrapper takes leases and is fenced once another
// owner took its session over: its agent's later output never lands.
func TestWrappedStoreStillFencesLeases(t *testing.T) {
	st := openStore(t)
	const ttl = 300 * time.Millisecond
	a, rtA := newReplica(t, wrappedStore{st}, &memForwarder{}, ttl)
	ctx := context.Background()
	cr, err := a.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: "w"})
	if err != nil {
		t.Fatal(err)
	}
	sid := cr.Session.ID
	defer rtA.Release(context.Background(), "w", sid)
	old := submit(t, a, sid, "old", "/sim words=100000 rate=10ms")
	waitTurn(t, a, "w", sid, old.Turn.ID, func(tr host.Turn) bool { return tr.Phase == host.PhaseDurablyAccepted })
	l, err := st.GetLease(ctx, "w", sid)
	if err != nil || l.Owner != a.Epoch() {
		t.Fatalf("the wrapped replica took no lease: %+v %v", l, err)
	}
	// A never renews; once its lease lapses another owner takes over.
	for l.Live {
		time.Sleep(20 * time.Millisecond)
		if l, err = st.GetLease(ctx, "w", sid); err != nil {
			t.Fatal(err)
		}
	}
	if l, err := st.AcquireLease(ctx, "w", sid, "ep_other", time.Hour); err != nil || l.Owner != "ep_other" {
		t.Fatalf("take over: %+v %v", l, err)
	}
	before := agentText(t, a, sid, old.Turn.ID)
	time.Sleep(150 * time.Millisecond) // A's sim emits a chunk every 10ms
	if after := agentText(t, a, sid, old.Turn.ID); after != before {
		t.Fatalf("the fenced replica's output landed through the wrapper: %d → %d bytes", len(before), len(after))
	}
}

// An agent's goal report is a write of its Turn like output: a replica
// whose session was taken over cannot adopt the goal its stale agent sets.
func TestStaleOwnerGoalReportIsFenced(t *testing.T) {
	ctx := context.Background()
	// Control: the owner adopts the goal its agent sets.
	live, rtLive := newReplica(t, openStore(t), &memForwarder{}, time.Hour)
	cr, err := live.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: "w"})
	if err != nil {
		t.Fatal(err)
	}
	defer rtLive.Release(context.Background(), "w", cr.Session.ID)
	r := submit(t, live, cr.Session.ID, "set", "/sim words=3 goal-set=owner-goal")
	waitTurn(t, live, "w", cr.Session.ID, r.Turn.ID, settled)
	if g, err := live.GetGoal(ctx, "w", cr.Session.ID); err != nil || g.Goal == nil || g.Goal.Objective != "owner goal" {
		t.Fatalf("the owner's agent goal was not adopted: %+v %v", g.Goal, err)
	}

	st := openStore(t)
	const ttl = 300 * time.Millisecond
	a, rtA := newReplica(t, st, &memForwarder{}, ttl)
	cr, err = a.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: "w"})
	if err != nil {
		t.Fatal(err)
	}
	sid := cr.Session.ID
	defer rtA.Release(context.Background(), "w", sid)
	start := time.Now()
	// The goal is set after 100 words at 20ms each: well after the takeover.
	old := submit(t, a, sid, "old", "/sim words=100 rate=20ms goal-set=stale-goal")
	waitTurn(t, a, "w", sid, old.Turn.ID, func(tr host.Turn) bool { return tr.Phase == host.PhaseDurablyAccepted })
	l, err := st.GetLease(ctx, "w", sid)
	for err == nil && l.Live {
		time.Sleep(20 * time.Millisecond)
		l, err = st.GetLease(ctx, "w", sid)
	}
	if err != nil {
		t.Fatal(err)
	}
	if l, err := st.AcquireLease(ctx, "w", sid, "ep_other", time.Hour); err != nil || l.Owner != "ep_other" {
		t.Fatalf("take over: %+v %v", l, err)
	}
	if time.Since(start) > 1500*time.Millisecond {
		t.Skip("the takeover came too late to precede the goal report")
	}
	time.Sleep(time.Until(start.Add(3 * time.Second))) // the stale agent reports its goal
	if g, err := a.GetGoal(ctx, "w", sid); err != nil || g.Goal != nil {
		t.Fatalf("the stale owner's agent goal became canonical after the takeover: %+v %v", g.Goal, err)
	}
}
