// Package conformance is the Host behaviour catalog. A store adapter supplies
// a Driver; every Scenario runs the public Host contract against that store
// and a scripted runtime (the sim agent), so all stores share one baseline.
//
// The runtime must understand the sim agent's prompt directives
// ("/sim hang", "/sim fail", "/sim crash", "/sim words=N", "/sim tool",
// "/sim permission", "/sim subagent") and implement
// host.InteractionResponder; the store must implement
// host.InteractionStore and its Tx host.InteractionTx.
package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// Driver opens the adapters one scenario runs against.
type Driver interface {
	// OpenStore returns a function that opens the same fresh, empty
	// database each time it is called (a second call models a restart).
	OpenStore(t *testing.T) func(t *testing.T) host.Store
	// NewRuntime starts a fresh runtime: a new agent connection that knows
	// nothing of earlier ones, as after a process restart.
	NewRuntime(t *testing.T) host.Runtime
	// CorruptTurn makes one stored turn undecodable (for example an
	// unknown phase), to prove recovery quarantines instead of failing.
	CorruptTurn(t *testing.T, s host.Store, ref host.TurnRef)
	// CorruptGoal makes a session's stored goal record undecodable and
	// CorruptGoalOperation a stored goal operation, writing the row
	// directly, to prove the Host quarantines them instead of acting.
	CorruptGoal(t *testing.T, s host.Store, ws, sessionID string)
	CorruptGoalOperation(t *testing.T, s host.Store, ws, clientSubmitID string)
	// NewRuntimeForking is NewRuntime whose agent attests the given fork
	// mode (the sim agent with through-turn fork, with only ACP
	// session/fork, or with none): the fork scenarios need it.
	NewRuntimeForking(t *testing.T, mode host.ForkMode) host.Runtime
}

// Scenario is one named behaviour.
type Scenario struct {
	Name string
	Run  func(t *testing.T, d Driver)
}

// Run runs every scenario as a subtest.
func Run(t *testing.T, d Driver) {
	for _, s := range Scenarios() {
		t.Run(s.Name, func(t *testing.T) { s.Run(t, d) })
	}
}

// fixture is one Host process over a store and runtime, with the seams the
// scenarios need: a dispatch counter, runtime and store fault hooks, a
// controllable clock and a recording observer.
type fixture struct {
	t       *testing.T
	d       Driver
	open    func(t *testing.T) host.Store
	store   *faultStore
	runtime *probeRuntime
	obs     *recordingObserver
	clock   *clock
	host    *host.Host
	// stopOps stops this Host's runtime-operation worker and waits for it.
	stopOps func()
}

const ws = "ws-conformance"

func newFixture(t *testing.T, d Driver) *fixture {
	t.Helper()
	f := &fixture{t: t, d: d, open: d.OpenStore(t), clock: &clock{}}
	f.start()
	t.Cleanup(func() { f.stopOps() })
	return f
}

// runOps starts the Host's runtime-operation worker, owned by the fixture.
func (f *fixture) runOps() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	h := f.host
	go func() { defer close(done); h.RunOperations(ctx) }()
	var once sync.Once
	f.stopOps = func() { once.Do(func() { cancel(); <-done }) }
}

// start builds a Host over a freshly opened store and a fresh runtime and
// runs recovery, as a process start does.
func (f *fixture) start() {
	f.t.Helper()
	f.store = &faultStore{Store: f.open(f.t)}
	f.runtime = &probeRuntime{Runtime: f.d.NewRuntime(f.t)}
	f.obs = &recordingObserver{}
	f.host = host.New(host.Config{Store: f.store, Runtime: f.runtime, Observer: f.obs, Now: f.clock.Now})
	if _, err := f.host.Recover(context.Background()); err != nil {
		f.t.Fatalf("recover: %v", err)
	}
	f.runOps()
}

// crash abandons the current Host without any clean-up (its runtime is left
// as is) and starts a new one on the same database, returning the report.
func (f *fixture) crash() host.RecoveryReport {
	f.t.Helper()
	// The old process's workers die with it; anything they were doing
	// writes nothing more.
	f.stopOps()
	f.store = &faultStore{Store: f.open(f.t)}
	f.runtime = &probeRuntime{Runtime: f.d.NewRuntime(f.t)}
	f.obs = &recordingObserver{}
	f.host = host.New(host.Config{Store: f.store, Runtime: f.runtime, Observer: f.obs, Now: f.clock.Now})
	rep, err := f.host.Recover(context.Background())
	if err != nil {
		f.t.Fatalf("recover after crash: %v", err)
	}
	f.runOps()
	return rep
}

var ctx = context.Background()

func (f *fixture) createEmpty() host.Session {
	f.t.Helper()
	r, err := f.host.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: ws, CreatedBy: "alice"})
	if err != nil {
		f.t.Fatalf("create session: %v", err)
	}
	return r.Session
}

func (f *fixture) send(sessionID, id, text string) (host.SendResult, error) {
	return f.host.SendInput(ctx, host.SendInput{WorkspaceID: ws, SessionID: sessionID,
		ClientSubmitID: id, Content: host.MessageContent{Text: text}, SubmittedBy: "alice"})
}

func (f *fixture) mustSend(sessionID, id, text string) host.Turn {
	f.t.Helper()
	r, err := f.send(sessionID, id, text)
	if err != nil {
		f.t.Fatalf("send %q: %v", text, err)
	}
	if r.Turn == nil {
		f.t.Fatalf("send %q returned no turn", text)
	}
	return *r.Turn
}

// waitTurn polls until the turn satisfies ok or the deadline passes.
func (f *fixture) waitTurn(ref host.Turn, what string, ok func(host.Turn) bool) host.Turn {
	f.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		t, err := f.host.GetTurn(ctx, ref.WorkspaceID, ref.SessionID, ref.ID)
		if err == nil && ok(t) {
			return t
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("turn %s never became %s (last %+v, err %v)", ref.ID, what, t, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (f *fixture) waitSettled(t host.Turn) host.Turn {
	f.t.Helper()
	return f.waitTurn(t, "settled", host.Turn.Settled)
}

func (f *fixture) messages(sessionID string, q host.MessageQuery) []host.Message {
	f.t.Helper()
	p, err := f.host.ListSessionMessages(ctx, ws, sessionID, q)
	if err != nil {
		f.t.Fatalf("list messages: %v", err)
	}
	return p.Messages
}

// waitAgentText polls until the session's agent text ends with suffix.
func (f *fixture) waitAgentText(sessionID, suffix string) {
	f.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		text := agentText(f.messages(sessionID, host.MessageQuery{}))
		if strings.HasSuffix(text, suffix) {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("agent text never ended with %q (last %q)", suffix, text)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func wantCode(t *testing.T, err error, code host.Code) {
	t.Helper()
	if got := host.CodeOf(err); got != code {
		t.Fatalf("want error code %q, got %q (%v)", code, got, err)
	}
}

func agentText(ms []host.Message) string {
	var s string
	for _, m := range ms {
		if m.Role == host.RoleAgent && m.Kind == host.KindText {
			s += m.Content.Text
		}
	}
	return s
}

// clock is a controllable clock: real time plus an offset.
type clock struct{ offset atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

// recordingObserver records published facts and can be made to fail.
type recordingObserver struct {
	mu    sync.Mutex
	facts []host.Fact
	// batches keeps each Publish call (one committed transaction).
	batches [][]host.Fact
	fail    atomic.Bool
	// gate, when set, holds every Publish until it is closed.
	gate atomic.Pointer[chan struct{}]
}

func (o *recordingObserver) Publish(_ context.Context, facts []host.Fact) error {
	if g := o.gate.Load(); g != nil {
		<-*g
	}
	if o.fail.Load() {
		return errors.New("observer down")
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.facts = append(o.facts, facts...)
	o.batches = append(o.batches, append([]host.Fact(nil), facts...))
	return nil
}

// batchesSince returns the published batches after the first n.
func (o *recordingObserver) batchesSince(n int) [][]host.Fact {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([][]host.Fact(nil), o.batches[n:]...)
}

func (o *recordingObserver) batchCount() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.batches)
}

func (o *recordingObserver) count(sessionID string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, f := range o.facts {
		if f.SessionID == sessionID {
			n++
		}
	}
	return n
}

func errf(format string, args ...any) error { return fmt.Errorf(format, args...) }
