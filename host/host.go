package host

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Config wires a Host. Store is required; Runtime is nil only for a
// read-only Host (tests and tools that read through the Host's queries).
type Config struct {
	Store    Store
	Runtime  Runtime
	Observer Observer
	Logger   *slog.Logger
	// Now is the clock; defaults to time.Now.
	Now func() time.Time
	// NewID returns a fresh opaque id; defaults to a random 128-bit hex id.
	NewID func(prefix string) string
	// RelayInterval is how often the outbox relay looks for facts the fast
	// path missed; RelayDelay how old a fact must be before it does.
	RelayInterval time.Duration
	RelayDelay    time.Duration
	// ReplicaID names this replica in runtime-operation leases. At startup
	// Recover requeues the operations a previous process of the same
	// replica had leased. Default "local".
	ReplicaID string
	// WorkspaceRoot is the directory every session's working directory
	// ("cwd" setting) must lie under (settings.go); pass it through
	// ResolveWorkspaceRoot. Empty: the cwd setting is not checked.
	WorkspaceRoot string
	// DeletionGuard, when set, admits each delete's exact closure before
	// any runtime is closed or tombstone written (delete.go).
	DeletionGuard SessionDeletionGuard
	// Cluster turns on session ownership and cross-replica forwarding
	// (ownership.go). Nil: this Host is the only runtime owner of its
	// store's sessions.
	Cluster *ClusterConfig
	// Epoch identifies this Host process; default a fresh random id. A
	// cluster transport that must subscribe under the epoch before the
	// Host exists (the Redis router) passes the one it used.
	Epoch string
}

// Host is the application core. One long-lived Host per process.
type Host struct {
	store   Store
	runtime Runtime
	log     *slog.Logger
	now     func() time.Time
	newID   func(prefix string) string
	epoch   string
	relay   struct{ interval, delay time.Duration }

	locks sessionLocks
	// releases are deleted sessions' runtimes still to release
	// (release_retry.go).
	releases releaseRetries
	// work tracks the Turns this process drives (reconcile.go).
	work turnWork
	// own tracks the session leases this Host holds (ownership.go).
	own ownership
	// settled wakes CancelTurn waiters when a turn settles (settle.go).
	settled settleWaiters

	pub publisher // publish.go

	replica string
	// opsWake nudges the runtime-operation worker (non-blocking, size 1).
	opsWake chan struct{}
	// workspaceRoot bounds session working directories (settings.go).
	workspaceRoot string
	guard         SessionDeletionGuard
	// goals is the goal loop's state (goal_loop.go).
	goals goalWorker
	// queue: successors of settled turns to dispatch (queue.go).
	queue queueState

	ready chan struct{}
	once  sync.Once
}

// New is Open for a configuration known to be valid (tests, tools): it
// panics on one that is not.
func New(cfg Config) *Host {
	h, err := Open(cfg)
	if err != nil {
		panic(err)
	}
	return h
}

// Open validates cfg and builds a Host. Call Recover before serving, then
// Run. A cluster configured so that nothing would fence a replica's writes
// is refused here rather than discovered as a split brain later.
func Open(cfg Config) (*Host, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	h := &Host{
		store:   cfg.Store,
		runtime: cfg.Runtime,
		log:     cfg.Logger,
		now:     cfg.Now,
		newID:   cfg.NewID,
		ready:   make(chan struct{}),
		replica: cfg.ReplicaID,
		opsWake: make(chan struct{}, 1),
		work:    newTurnWork(),

		workspaceRoot: cfg.WorkspaceRoot,
		guard:         cfg.DeletionGuard,
	}
	h.queue.init()
	if h.replica == "" {
		h.replica = "local"
	}
	if h.log == nil {
		h.log = slog.Default()
	}
	if h.now == nil {
		h.now = time.Now
	}
	if h.newID == nil {
		h.newID = RandomID
	}
	h.pub.observer, h.pub.log, h.pub.delivered = cfg.Observer, h.log, map[int64]bool{}
	if o, ok := cfg.Observer.(InlineObserver); ok {
		h.pub.inline = o.PublishesInline()
	}
	h.relay.interval, h.relay.delay = cfg.RelayInterval, cfg.RelayDelay
	if h.relay.interval <= 0 {
		h.relay.interval = time.Second
	}
	if h.relay.delay <= 0 {
		h.relay.delay = 2 * time.Second
	}
	h.epoch = cfg.Epoch
	if h.epoch == "" {
		h.epoch = RandomID("ep")
	}
	if c := cfg.Cluster; c != nil {
		h.own.fwd, h.own.ttl = c.Forwarder, c.LeaseTTL
		if h.own.ttl == 0 {
			h.own.ttl = DefaultLeaseTTL
		}
	}
	return h, nil
}

// validate refuses configurations the Host could only run wrongly.
func (cfg Config) validate() error {
	if cfg.Store == nil {
		return errors.New("host: config: a Store is required")
	}
	c := cfg.Cluster
	if c == nil {
		return nil
	}
	// Leases are what fence a replica that lost a session; they are taken
	// only where commands can reach the owner, so a cluster without a
	// Forwarder would run every replica as the sole writer.
	if c.Forwarder == nil {
		return errors.New("host: config: cluster mode without a Forwarder: session leases would not fence replicas' writes")
	}
	if c.LeaseTTL < 0 || (c.LeaseTTL > 0 && c.LeaseTTL < minLeaseTTL) {
		return fmt.Errorf("host: config: cluster lease TTL %v: want at least %v", c.LeaseTTL, minLeaseTTL)
	}
	return nil
}

// Run runs the Host's background workers as one lifecycle until ctx ends:
// the outbox relay and the runtime-operation worker. It returns once both
// stopped.
func (h *Host) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { h.RunOperations(ctx) })
	h.RunRelay(ctx)
	wg.Wait()
	h.FlushPublish() // the fast path's goroutines end with the Host
	return nil
}

// Epoch identifies this Host process; it changes on every start.
func (h *Host) Epoch() string { return h.epoch }

// Agent describes the runtime's agent and the fork it attests now.
func (h *Host) Agent() AgentInfo {
	if h.runtime == nil { // a read-only Host (hub tests, tools)
		return AgentInfo{}
	}
	a := h.runtime.Describe()
	a.Fork, a.ForkReason = h.ForkCapability()
	return a
}

// Ready is closed once Recover has finished.
func (h *Host) Ready() <-chan struct{} { return h.ready }

// Ping reports whether the canonical store answers, for readiness checks.
func (h *Host) Ping(ctx context.Context) error {
	if err := h.store.Ping(ctx); err != nil {
		e := wrap(CodeUnavailable, err, "store does not answer")
		e.Reason = ReasonStoreUnavailable
		return e
	}
	return nil
}

// RandomID returns prefix_ followed by 128 random bits in hex.
func RandomID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + "_" + hex.EncodeToString(b[:])
}

func (h *Host) nowUTC() time.Time { return h.now().UTC().Truncate(time.Millisecond) }

// commit runs fn in one transaction and, after commit, queues the facts fn
// appended for publication (publish.go). Publication failure is logged,
// never returned: the outbox row makes the fact durable and the relay
// republishes it.
func (h *Host) commit(ctx context.Context, fn func(tx Tx, emit func(...Fact)) error) error {
	var facts []Fact
	var ids []int64
	err := h.store.Update(ctx, func(tx Tx) error {
		facts, ids = facts[:0], nil
		w := &writtenTx{Tx: tx}
		if err := fn(w, func(f ...Fact) { facts = append(facts, f...) }); err != nil {
			return err
		}
		if len(facts) == 0 {
			return nil
		}
		facts = w.attach(dedupeFacts(facts))
		var err error
		ids, err = tx.AppendFacts(ctx, facts...)
		return err
	})
	if err != nil {
		return staleOwner(err)
	}
	if len(facts) > 0 {
		h.pub.publish(ctx, facts, ids)
	}
	return nil
}

func dedupeFacts(in []Fact) []Fact {
	out := in[:0:0]
	seen := map[Fact]bool{}
	for _, f := range in {
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	return out
}

// sessionLocks serializes commands per session inside this process. It is an
// ordering aid only: correctness across replicas comes from the store.
type sessionLocks struct {
	mu sync.Mutex
	m  map[string]*sessionLock
}

type sessionLock struct {
	mu   sync.Mutex
	refs int
}

func (l *sessionLocks) lock(ws, id string) func() {
	key := ws + "/" + id
	l.mu.Lock()
	if l.m == nil {
		l.m = map[string]*sessionLock{}
	}
	sl := l.m[key]
	if sl == nil {
		sl = &sessionLock{}
		l.m[key] = sl
	}
	sl.refs++
	l.mu.Unlock()
	sl.mu.Lock()
	return func() {
		sl.mu.Unlock()
		l.mu.Lock()
		sl.refs--
		if sl.refs == 0 {
			delete(l.m, key)
		}
		l.mu.Unlock()
	}
}
