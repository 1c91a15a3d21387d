// Package hub multiplexes WebSocket watchers onto topics. A typed transcript
// delta from the bus is applied to its session topic at once (it is the
// committed change itself); any other fact, and a delta that does not follow
// exactly the version a topic holds, only marks the topic dirty, and a small
// worker pool rereads canonical state once per dirty topic in one read
// transaction, however many watchers it has, diffs it against what the topic
// last emitted, encodes each event once and writes the same bytes to every
// watcher.
package hub

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// Reader is the part of the Host the hub rereads canonical state through.
// *host.Host implements it.
type Reader interface {
	// SessionChanges is a session topic's one read: the session, its
	// newest turns and its messages after a version, in one transaction.
	SessionChanges(ctx context.Context, ws, sessionID string, q host.ChangesQuery) (host.Changes, error)
	GetSession(ctx context.Context, ws, id string) (host.Session, error)
	ListSessions(ctx context.Context, ws string, q host.SessionQuery) (host.SessionPage, error)
	GetSessionInteractionTreeSnapshot(ctx context.Context, ws, rootSessionID string) (host.InteractionTree, error)
	ListTurnInteractions(ctx context.Context, ws, sessionID string, fromSeq, toSeq int64) ([]host.Interaction, error)
}

// Config wires a Hub. Reader and Bus are required; zero values elsewhere
// take the defaults below.
type Config struct {
	Reader Reader
	Bus    Bus
	// Goals, Queues and Agent are the Reader's optional parts (the Host
	// provides all three; cmd/ensemble wires them). Nil: session
	// snapshots carry no goal, no queue, no agent attestation.
	Goals  GoalReader
	Queues QueueReader
	Agent  AgentReader
	Logger *slog.Logger
	// Epoch identifies this hub's event streams; random by default. It
	// changes on every start, so a resume across restarts never matches.
	Epoch string
	// Workers rereading dirty topics in parallel (default 4).
	Workers int
	// RingEvents and RingBytes bound each topic's replay ring
	// (default 1024 events, 4 MiB).
	RingEvents int
	RingBytes  int
	// Linger keeps a topic (its ring and its bus subscription) alive after
	// its last watcher left so a reconnecting client can resume (default 2m).
	Linger time.Duration
	// QueueBytes caps one connection's outgoing queue; past it the
	// connection is closed as a slow consumer (default 8 MiB).
	QueueBytes int
	// PingInterval between application pings (default 25s); a connection
	// silent for IdleTimeout is closed (default 3 pings).
	PingInterval time.Duration
	IdleTimeout  time.Duration
	// WriteTimeout bounds one frame write (default 10s).
	WriteTimeout time.Duration
	// TurnWindow is how many newest turns a session topic tracks and
	// snapshots (default 20).
	TurnWindow int
	// MessageWindow and MessageWindowBytes bound the newest messages a
	// session topic keeps for snapshots (default 200 messages, 1 MiB).
	MessageWindow      int
	MessageWindowBytes int
	// SessionPage is the size of a workspace topic's snapshot (default 50).
	SessionPage int
	// CatchUpMessages bounds the messages a resume from a position older
	// than the window reads from the store (default 1000, at most 1000);
	// past it the client gets a snapshot.
	CatchUpMessages int
	// Presence shares who is here between replicas (default: in-process).
	// Replica is the replica name shown in presence (default: the epoch).
	Presence PresenceStore
	Replica  string
	// PresenceInterval is how often presence is published and merged
	// (default 1s); PresenceTTL how long a replica's entries outlive its
	// last publish (default 6s: a dead replica's people leave within it).
	PresenceInterval time.Duration
	PresenceTTL      time.Duration
}

func (c *Config) defaults() {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Epoch == "" {
		c.Epoch = host.RandomID("hub")
	}
	setInt := func(p *int, v int) {
		if *p <= 0 {
			*p = v
		}
	}
	setDur := func(p *time.Duration, v time.Duration) {
		if *p <= 0 {
			*p = v
		}
	}
	setInt(&c.Workers, 4)
	setInt(&c.RingEvents, 1024)
	setInt(&c.RingBytes, 4<<20)
	setDur(&c.Linger, 2*time.Minute)
	setInt(&c.QueueBytes, 8<<20)
	setDur(&c.PingInterval, 25*time.Second)
	setDur(&c.IdleTimeout, 3*c.PingInterval)
	setDur(&c.WriteTimeout, 10*time.Second)
	setInt(&c.TurnWindow, 20)
	setInt(&c.MessageWindow, 200)
	setInt(&c.MessageWindowBytes, 1<<20)
	setInt(&c.SessionPage, 50)
	setInt(&c.CatchUpMessages, 1000)
	c.CatchUpMessages = min(c.CatchUpMessages, 1000)
	if c.Presence == nil {
		c.Presence = NewLocalPresence()
	}
	if c.Replica == "" {
		c.Replica = c.Epoch
	}
	setDur(&c.PresenceInterval, time.Second)
	setDur(&c.PresenceTTL, 6*c.PresenceInterval)
}

// Hub owns topics, connections and the reread workers.
type Hub struct {
	cfg Config
	log *slog.Logger

	ctx    context.Context // ends at Close; parent of reread contexts
	cancel context.CancelFunc
	wg     sync.WaitGroup // workers and the janitor

	mu         sync.Mutex // topics, workspaces, conns
	workspaces map[string]*wsEntry
	conns      map[*Conn]struct{}
	closed     bool
	incarn     uint64                  // topic incarnations, part of each topic's epoch
	nextSlot   uint32                  // heartbeat slot of the next connection
	slots      [heartbeatSlots][]*Conn // each slot's connections (heartbeat.go)

	expMu    sync.Mutex
	expiring expiryHeap // connections with an expiry, soonest first (heartbeat.go)

	pwake       chan struct{} // presence changed locally
	presenceGen atomic.Uint64 // counts local presence changes

	poll *poller // readiness of idle connections' sockets; nil: a reader goroutine each

	jobs   chan func()  // to idle workers (spawn.go)
	pooled atomic.Int32 // workers waiting for or running a pooled job

	dmu    sync.Mutex // dirty queue (after mu in lock order)
	dq     []*topic
	failed []*topic
	wake   chan struct{}

	stats stats
}

// wsEntry is one workspace with local topics and its bus subscription.
type wsEntry struct {
	unsub    func()
	ws       *topic
	sessions map[string]*topic
}

func (e *wsEntry) empty() bool { return e.ws == nil && len(e.sessions) == 0 }

// New starts a hub: its reread workers and its janitor run until Close.
func New(cfg Config) *Hub {
	cfg.defaults()
	ctx, cancel := context.WithCancel(context.Background())
	h := &Hub{
		cfg: cfg, log: cfg.Logger, ctx: ctx, cancel: cancel,
		workspaces: map[string]*wsEntry{}, conns: map[*Conn]struct{}{},
		wake: make(chan struct{}, 1), pwake: make(chan struct{}, 1),
		jobs: make(chan func()),
	}
	for range cfg.Workers {
		h.wg.Add(1)
		go h.worker()
	}
	if p, err := newPoller(); err == nil {
		h.poll = p
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			p.run()
		}()
	}
	h.wg.Add(3)
	go h.janitor()
	go h.heartbeat()
	go h.presenceLoop()
	return h
}

// Epoch is the hub epoch all topic epochs derive from.
func (h *Hub) Epoch() string { return h.cfg.Epoch }

// acquire returns the topic, creating it (and the workspace's bus
// subscription) if needed, with one reference held for the caller.
func (h *Hub) acquire(kind topicKind, ws, sid string) (*topic, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, &host.Error{Code: host.CodeUnavailable, Reason: host.ReasonShuttingDown, Message: "server is shutting down"}
	}
	e := h.workspaces[ws]
	if e == nil {
		e = &wsEntry{sessions: map[string]*topic{}}
		h.workspaces[ws] = e
		e.unsub = h.cfg.Bus.Subscribe(ws, h.onFacts)
	}
	var t *topic
	if kind == kindWorkspace {
		t = e.ws
	} else {
		t = e.sessions[sid]
	}
	if t == nil {
		h.incarn++
		t = newTopic(h, kind, ws, sid, h.incarn)
		if kind == kindWorkspace {
			e.ws = t
		} else {
			e.sessions[sid] = t
		}
		h.stats.topics.Add(1)
	}
	t.refs++
	return t, nil
}

// release drops one reference; an unreferenced topic lingers, then the
// janitor removes it.
func (h *Hub) release(t *topic) {
	h.mu.Lock()
	t.refs--
	if t.refs == 0 {
		t.idleSince = time.Now()
		if !t.watched.Load() {
			t.idleSince = time.Time{}
		}
	}
	h.mu.Unlock()
}

// onFacts is the bus callback: the facts of one published batch. The
// events they emit to a watcher whose socket is free are written after the
// last fact, together (one frame for a client that batches): an
// acceptance's first chunk and its Turn reach a watcher in one write.
func (h *Hub) onFacts(facts []host.Fact) {
	var w writeScope
	for _, f := range facts {
		h.onFact(f, &w)
	}
	w.write()
}

// onFact applies one fact. A typed transcript delta is applied at once
// to its session topic (the delta is the committed change itself); every
// other fact only marks topics dirty for a reread. The writes its events
// need go to w.
func (h *Hub) onFact(f host.Fact, w *writeScope) {
	if f.Kind == host.FactGoalState {
		h.onGoalFact(f) // goal.go
		return
	}
	if f.Kind == host.FactTrashChanged {
		h.onTrashFact(f) // trash.go
		return
	}
	if f.Turn != nil && f.Kind == host.FactSessionChanged && f.SessionID != "" {
		h.onTypedTurn(f, w) // typed.go
		return
	}
	if t := h.markFact(f); t != nil && !t.applyDelta(f.Delta, w) {
		h.stats.deltaGaps.Add(1)
		h.markDirty(t, dirtyTranscript())
	}
}

// markFact marks the topics a fact dirties and returns the session topic a
// typed delta should be applied to, if any.
func (h *Hub) markFact(f host.Fact) *topic {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.workspaces[f.WorkspaceID]
	if e == nil {
		return nil
	}
	if f.SessionID == "" {
		if e.ws != nil {
			h.markDirty(e.ws, dirtyAll())
		}
		for _, t := range e.sessions {
			h.markDirty(t, dirtyAll())
		}
		return nil
	}
	if f.Kind == host.FactQueueChanged {
		// Only the session's own topic shows its queue.
		if t := e.sessions[f.SessionID]; t != nil {
			h.markDirty(t, dirtyQueue())
		}
		return nil
	}
	if f.Kind == host.FactInteractionTreeDirty {
		// One tree: every watched session of it rereads the tree once.
		for _, t := range e.sessions {
			if t.treeRoot() == f.SessionID {
				h.markDirty(t, dirtyTree())
			}
		}
		return nil
	}
	// A transcript-only fact moves just messageVersion/updatedAt, which
	// session summaries ignore, so the workspace topic need not reread.
	transcript := f.Kind == host.FactTranscriptAdvanced || f.Kind == host.FactTranscriptAppended
	if e.ws != nil && !transcript {
		h.markDirty(e.ws, dirtySession(f.SessionID))
	}
	t := e.sessions[f.SessionID]
	if t == nil {
		return nil
	}
	switch {
	case f.Kind == host.FactTranscriptAppended && f.Delta != nil:
		return t
	case transcript:
		h.markDirty(t, dirtyTranscript())
	default:
		h.markDirty(t, dirtyTurn(f.TurnID))
	}
	return nil
}

// markDirty records what changed and queues the topic once. A topic being
// reread is queued again when its reread ends (coalescing: facts during a
// reread never pile up).
func (h *Hub) markDirty(t *topic, d dirtyMark) {
	h.dmu.Lock()
	t.dirty.add(d)
	t.pending = true
	if !t.running && !t.queued {
		t.queued = true
		h.dq = append(h.dq, t)
		h.signal()
	}
	h.dmu.Unlock()
}

func (h *Hub) signal() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// next blocks until a dirty topic is available or the hub closes.
func (h *Hub) next() (*topic, dirtySet) {
	for {
		h.dmu.Lock()
		if len(h.dq) > 0 {
			t := h.dq[0]
			h.dq[0] = nil
			h.dq = h.dq[1:]
			if len(h.dq) > 0 {
				h.signal() // let another worker take the rest
			}
			t.queued, t.running, t.pending = false, true, false
			d := t.dirty.take()
			t.reading = d
			h.dmu.Unlock()
			return t, d
		}
		h.dmu.Unlock()
		select {
		case <-h.wake:
		case <-h.ctx.Done():
			return nil, dirtySet{}
		}
	}
}

// done ends a reread. A failed one keeps its dirty marks and is retried by
// the janitor rather than spinning on a store that is down.
func (h *Hub) done(t *topic, owed *dirtySet) {
	h.dmu.Lock()
	t.running, t.reading = false, dirtySet{}
	if owed != nil {
		t.dirty.merge(*owed)
		h.failed = append(h.failed, t)
	} else if t.pending && !t.queued {
		t.queued = true
		h.dq = append(h.dq, t)
		h.signal()
	}
	h.dmu.Unlock()
}

func (h *Hub) worker() {
	defer h.wg.Done()
	for {
		t, d := h.next()
		if t == nil {
			return
		}
		var owed *dirtySet
		if !t.removed.Load() {
			ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
			if err := t.refresh(ctx, d); err != nil && h.ctx.Err() == nil {
				h.log.Warn("hub reread failed; retrying", "topic", t.name, "err", err)
				owed = &d // keep what we owed for the retry
			}
			cancel()
			h.stats.rereads.Add(1)
		}
		h.done(t, owed)
	}
}

// janitor retries failed rereads and removes topics idle past Linger.
func (h *Hub) janitor() {
	defer h.wg.Done()
	tick := time.NewTicker(h.janitorInterval())
	defer tick.Stop()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-tick.C:
		}
		h.dmu.Lock()
		failed := h.failed
		h.failed = nil
		h.dmu.Unlock()
		for _, t := range failed {
			if !t.removed.Load() {
				h.markDirty(t, dirtyMark{})
			}
		}
		h.sweep(time.Now())
	}
}

func (h *Hub) janitorInterval() time.Duration {
	d := h.cfg.Linger / 4
	if d > time.Second {
		d = time.Second
	}
	if d < 10*time.Millisecond {
		d = 10 * time.Millisecond
	}
	return d
}

// sweep removes idle topics and drops bus subscriptions of workspaces that
// no longer have any topic.
func (h *Hub) sweep(now time.Time) {
	var unsubs []func()
	h.mu.Lock()
	for ws, e := range h.workspaces {
		if t := e.ws; t != nil && t.refs == 0 && now.Sub(t.idleSince) >= h.cfg.Linger {
			t.removed.Store(true)
			e.ws = nil
			h.stats.topics.Add(-1)
		}
		for sid, t := range e.sessions {
			if t.refs == 0 && now.Sub(t.idleSince) >= h.cfg.Linger {
				t.removed.Store(true)
				delete(e.sessions, sid)
				h.stats.topics.Add(-1)
			}
		}
		if e.empty() {
			unsubs = append(unsubs, e.unsub)
			delete(h.workspaces, ws)
		}
	}
	h.mu.Unlock()
	for _, u := range unsubs {
		u()
	}
}

// Close closes every connection with 4001 (server shutting down), stops the
// workers and the janitor, and drops all bus subscriptions. It waits for the
// hub's own goroutines; connection goroutines end as their sockets close.
func (h *Hub) Close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	conns := make([]*Conn, 0, len(h.conns))
	for c := range h.conns {
		conns = append(conns, c)
	}
	var unsubs []func()
	for ws, e := range h.workspaces {
		unsubs = append(unsubs, e.unsub)
		if e.ws != nil {
			e.ws.removed.Store(true)
		}
		for _, t := range e.sessions {
			t.removed.Store(true)
		}
		delete(h.workspaces, ws)
	}
	h.stats.topics.Store(0)
	h.mu.Unlock()
	for _, c := range conns {
		c.Close(CloseShutdown, "server shutting down")
	}
	for _, u := range unsubs {
		u()
	}
	h.cancel()
	if h.poll != nil {
		h.poll.close() // polled connections end as their close handshakes do
	}
	h.wg.Wait()
}

// Stats are cumulative counters and gauges for metrics.
type Stats struct {
	Connections   int64
	Topics        int64
	Rereads       int64
	Events        int64
	FramesFanned  int64
	SlowConsumers int64
	// Deltas applied, dropped as duplicates, and refused (gap → reread).
	DeltasApplied   int64
	DeltaDuplicates int64
	DeltaGapRereads int64
	// TypedTurns are turn facts applied to a topic from the committed Turn
	// they carry, without a reread (typed.go).
	TypedTurns int64
	// Superseded counts queued frames replaced by a newer one of the same
	// key (latest wins); QueuedBytes is what all connections hold unsent.
	Superseded  int64
	QueuedBytes int64
	// Writes are WebSocket frames put on sockets and FramesWritten the
	// queued frames they carried: their ratio says whether v2 batching
	// happens under load (1 frame per write means one system call each).
	Writes        int64
	FramesWritten int64
	// InlineWrites are the writes made on the goroutine that applied a
	// delta, because the socket took them at once (no worker woken).
	InlineWrites int64
	// PooledWorkers are goroutines kept for short connection jobs (reads
	// after a readiness event, flushes); bounded, whatever the connections.
	PooledWorkers int64
}

type stats struct {
	conns, topics, rereads, events, fanned, slow, superseded, queued atomic.Int64
	deltas, deltaDups, deltaGaps, typedTurns                         atomic.Int64
	writes, framesWritten, inlineWrites                              atomic.Int64
}

// Stats returns a snapshot of the counters.
func (h *Hub) Stats() Stats {
	return Stats{
		Connections: h.stats.conns.Load(), Topics: h.stats.topics.Load(),
		Rereads: h.stats.rereads.Load(), Events: h.stats.events.Load(),
		FramesFanned: h.stats.fanned.Load(), SlowConsumers: h.stats.slow.Load(),
		DeltasApplied: h.stats.deltas.Load(), DeltaDuplicates: h.stats.deltaDups.Load(),
		DeltaGapRereads: h.stats.deltaGaps.Load(), TypedTurns: h.stats.typedTurns.Load(),
		Superseded: h.stats.superseded.Load(), QueuedBytes: h.stats.queued.Load(),
		PooledWorkers: int64(h.pooled.Load()),
		Writes:        h.stats.writes.Load(), FramesWritten: h.stats.framesWritten.Load(),
		InlineWrites: h.stats.inlineWrites.Load(),
	}
}
