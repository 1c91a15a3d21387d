// Package redisbus carries the Host's post-commit facts between replicas over
// Redis pub/sub (github.com/redis/go-redis/v9). It is a host.Observer on the
// publishing side and a hub bus on the receiving side: one channel per
// workspace, subscribed only while this replica has local watchers there.
//
// Facts are wake-up hints (the hub rereads canonical state), so the bus
// guarantees no delivery: a fact published while a subscriber is
// disconnected is lost. What it does guarantee is that a subscriber never
// misses a gap silently: every time a workspace channel becomes subscribed
// (the first time, and every time go-redis reconnects and resubscribes), the
// bus hands that workspace's local subscribers a resync fact, and they reread
// everything. Nothing lives only in Redis.
package redisbus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ensemble-dev/ensemble/host"
)

// Options tune a Bus. Zero values take the defaults.
type Options struct {
	// Prefix namespaces every key and channel (default "ensemble:"), so
	// several deployments can share one Redis.
	Prefix string
	// Logger receives connection warnings. Nil discards them.
	Logger *slog.Logger
	// PublishTimeout bounds one Publish call (default 500ms). A command
	// never waits longer than this for Redis; a fact that missed Redis is
	// republished by the outbox relay.
	PublishTimeout time.Duration
	// PublishBackoff is how long Publish fails fast after a failed publish
	// (default 1s), so a Redis outage costs commands nothing.
	PublishBackoff time.Duration
	// HealthInterval is how long the subscription may stay silent before
	// the bus pings it; a ping unanswered for as long again makes the bus
	// reconnect (default 5s). It catches half-open connections.
	HealthInterval time.Duration
}

func (o *Options) defaults() {
	if o.Prefix == "" {
		o.Prefix = "ensemble:"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.PublishTimeout <= 0 {
		o.PublishTimeout = 500 * time.Millisecond
	}
	if o.PublishBackoff <= 0 {
		o.PublishBackoff = time.Second
	}
	if o.HealthInterval <= 0 {
		o.HealthInterval = 5 * time.Second
	}
}

// Bus is the Redis bus. Create it with New or Open and Close it when done;
// its goroutines (receive loop, subscription reconciler, health check) run
// until Close.
type Bus struct {
	rdb  *redis.Client
	opts Options
	log  *slog.Logger
	// id tags what this bus publishes so its own messages, already
	// delivered locally, are skipped when Redis echoes them back.
	id string

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex // subs, next, closed
	next   uint64
	subs   map[string]map[uint64]func([]host.Fact)
	closed bool
	// confirmed: workspaces Redis confirmed on the current connection; a
	// subscriber joining one gets its own resync (the confirmation's went
	// to the subscribers before it).
	confirmed map[string]bool

	psMu       sync.Mutex // ps, subscribed
	ps         *redis.PubSub
	subscribed map[string]bool // workspaces requested on ps

	kick      chan struct{}
	lastRx    atomic.Int64 // unix nanos of the last frame on the subscription
	downUntil atomic.Int64 // unix nanos: Publish fails fast before this

	stats struct{ published, publishFailures, received, resyncs, reconnects atomic.Int64 }
}

var _ host.Observer = (*Bus)(nil)

// Open connects to the Redis at url (redis:// or rediss://) and checks it
// answers within timeout, so a wrong URL fails at start. Later outages are
// tolerated: see the package comment.
func Open(ctx context.Context, url string, timeout time.Duration, opts Options) (*Bus, error) {
	o, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	// Honour context deadlines on the socket, so a bounded Publish is
	// really bounded.
	o.ContextTimeoutEnabled = true
	rdb := redis.NewClient(o)
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis %s does not answer: %w", o.Addr, err)
	}
	b := New(rdb, opts)
	return b, nil
}

// New starts a bus on rdb. Close closes rdb too. rdb should have
// ContextTimeoutEnabled set so Publish's timeout holds on the socket.
func New(rdb *redis.Client, opts Options) *Bus {
	opts.defaults()
	ctx, cancel := context.WithCancel(context.Background())
	b := &Bus{
		rdb: rdb, opts: opts, log: opts.Logger, id: host.RandomID("bus"),
		ctx: ctx, cancel: cancel,
		subs: map[string]map[uint64]func([]host.Fact){}, subscribed: map[string]bool{}, confirmed: map[string]bool{},
		kick: make(chan struct{}, 1),
	}
	b.ps = rdb.Subscribe(ctx) // no channel yet: connects lazily
	b.lastRx.Store(time.Now().UnixNano())
	b.wg.Add(3)
	go b.receive()
	go b.reconcile()
	go b.health()
	return b
}

// Client is the underlying Redis client (shared with the cross-replica
// request routing).
func (b *Bus) Client() *redis.Client { return b.rdb }

// Prefix is the key and channel namespace.
func (b *Bus) Prefix() string { return b.opts.Prefix }

// Close stops the bus's goroutines and closes the Redis client. Callbacks
// are not called after Close returns.
func (b *Bus) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.subs = map[string]map[uint64]func([]host.Fact){}
	b.mu.Unlock()
	b.cancel()
	b.psMu.Lock()
	ps := b.ps
	b.psMu.Unlock()
	_ = ps.Close()
	b.wg.Wait()
	return b.rdb.Close()
}

func (b *Bus) channel(ws string) string { return b.opts.Prefix + "ws:" + ws }

func (b *Bus) workspaceOf(channel string) (string, bool) {
	return strings.CutPrefix(channel, b.opts.Prefix+"ws:")
}

// envelope is one published message: facts of one workspace.
type envelope struct {
	From  string      `json:"from"`
	Facts []host.Fact `json:"facts"`
}

// Publish sends facts to Redis for the other replicas, one message per
// workspace, and delivers them to this replica's subscribers while Redis
// answers: the round trip overlaps the local delivery (the hubs' socket
// writes) instead of following it. It returns once both are done; a Redis
// failure is returned (the Host logs it and the outbox relay republishes),
// and it never waits longer than PublishTimeout.
func (b *Bus) Publish(ctx context.Context, facts []host.Fact) error {
	if len(facts) == 0 {
		return nil
	}
	byWS := map[string][]host.Fact{}
	var order []string
	for _, f := range facts {
		if _, ok := byWS[f.WorkspaceID]; !ok {
			order = append(order, f.WorkspaceID)
		}
		byWS[f.WorkspaceID] = append(byWS[f.WorkspaceID], f)
	}
	sent := b.send(ctx, order, byWS)
	for _, ws := range order {
		b.deliver(ws, byWS[ws])
	}
	return <-sent
}

// send publishes each workspace's facts to Redis on a goroutine of its own
// and reports the outcome on the returned channel, which the caller always
// reads (so the goroutine never outlives Publish).
func (b *Bus) send(ctx context.Context, order []string, byWS map[string][]host.Fact) <-chan error {
	res := make(chan error, 1)
	if time.Now().UnixNano() < b.downUntil.Load() {
		b.stats.publishFailures.Add(1)
		res <- errors.New("redisbus: redis unavailable (backing off)")
		return res
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.opts.PublishTimeout)
	pipe := b.rdb.Pipeline()
	for _, ws := range order {
		data, err := json.Marshal(envelope{From: b.id, Facts: byWS[ws]})
		if err != nil {
			cancel()
			res <- fmt.Errorf("redisbus: encode facts: %w", err)
			return res
		}
		pipe.Publish(ctx, b.channel(ws), data)
	}
	go func() {
		defer cancel()
		if _, err := pipe.Exec(ctx); err != nil {
			b.downUntil.Store(time.Now().Add(b.opts.PublishBackoff).UnixNano())
			b.stats.publishFailures.Add(1)
			res <- fmt.Errorf("redisbus: publish: %w", err)
			return
		}
		b.stats.published.Add(int64(len(order)))
		res <- nil
	}()
	return res
}

// Subscribe registers fn for one workspace's facts until unsubscribe is
// called. It never waits on Redis: the channel is subscribed in the
// background, and once Redis confirms it fn receives a resync fact (and
// again after every reconnect). fn must return quickly.
func (b *Bus) Subscribe(ws string, fn func([]host.Fact)) func() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return func() {}
	}
	b.next++
	id := b.next
	m := b.subs[ws]
	if m == nil {
		m = map[uint64]func([]host.Fact){}
		b.subs[ws] = m
	}
	m[id] = fn
	if b.confirmed[ws] {
		// Redis confirmed this workspace before fn joined: fn gets the
		// resync every subscriber is promised, from a goroutine Close
		// waits for (Subscribe never calls fn itself).
		b.stats.resyncs.Add(1)
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			fn([]host.Fact{{WorkspaceID: ws, Kind: host.FactResync}})
		}()
	}
	b.mu.Unlock()
	b.kickReconcile()
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			if m := b.subs[ws]; m != nil {
				delete(m, id)
				if len(m) == 0 {
					delete(b.subs, ws)
				}
			}
			b.mu.Unlock()
			b.kickReconcile()
		})
	}
}

// deliver calls ws's subscribers outside the lock, so a callback may
// (un)subscribe.
func (b *Bus) deliver(ws string, facts []host.Fact) {
	b.mu.Lock()
	fns := make([]func([]host.Fact), 0, len(b.subs[ws]))
	for _, fn := range b.subs[ws] {
		fns = append(fns, fn)
	}
	b.mu.Unlock()
	for _, fn := range fns {
		fn(facts)
	}
}

// Resync asks every local subscriber of ws to reread its whole workspace.
func (b *Bus) Resync(ws string) {
	b.stats.resyncs.Add(1)
	b.deliver(ws, []host.Fact{{WorkspaceID: ws, Kind: host.FactResync}})
}

func (b *Bus) kickReconcile() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// reconcile makes the Redis subscription match the workspaces with local
// subscribers. go-redis remembers a channel even when the SUBSCRIBE could
// not be sent and subscribes it on its next connection, so a request made
// during an outage takes effect (and is confirmed, and resynced) when Redis
// returns.
func (b *Bus) reconcile() {
	defer b.wg.Done()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-b.kick:
		}
		b.mu.Lock()
		want := make(map[string]bool, len(b.subs))
		for ws := range b.subs {
			want[ws] = true
		}
		b.mu.Unlock()

		b.psMu.Lock()
		var add, drop []string
		for ws := range want {
			if !b.subscribed[ws] {
				add = append(add, ws)
				b.subscribed[ws] = true
			}
		}
		for ws := range b.subscribed {
			if !want[ws] {
				drop = append(drop, ws)
				delete(b.subscribed, ws)
			}
		}
		ps := b.ps
		b.psMu.Unlock()
		if len(add) == 0 && len(drop) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		if len(add) > 0 {
			if err := ps.Subscribe(ctx, b.channels(add)...); err != nil && b.ctx.Err() == nil {
				b.log.Warn("redis subscribe failed; it is retried on reconnect", "workspaces", len(add), "err", err)
			}
		}
		if len(drop) > 0 {
			if err := ps.Unsubscribe(ctx, b.channels(drop)...); err != nil && b.ctx.Err() == nil {
				b.log.Warn("redis unsubscribe failed", "workspaces", len(drop), "err", err)
			}
		}
		cancel()
	}
}

func (b *Bus) channels(wss []string) []string {
	out := make([]string, len(wss))
	for i, ws := range wss {
		out[i] = b.channel(ws)
	}
	return out
}

func (b *Bus) current() *redis.PubSub {
	b.psMu.Lock()
	defer b.psMu.Unlock()
	return b.ps
}

// receive reads the subscription until Close. Every subscribe confirmation
// (first subscription or go-redis's silent resubscribe after a reconnect)
// resyncs that workspace.
func (b *Bus) receive() {
	defer b.wg.Done()
	fails := 0
	for {
		ps := b.current()
		msg, err := ps.Receive(b.ctx)
		if b.ctx.Err() != nil {
			return
		}
		if err != nil {
			if errors.Is(err, redis.ErrClosed) && b.current() != ps {
				continue // the health check replaced the subscription
			}
			if fails == 0 {
				b.log.Warn("redis subscription lost; reconnecting", "err", err)
				// Confirmed again (and resynced) on the new connection.
				b.mu.Lock()
				clear(b.confirmed)
				b.mu.Unlock()
			}
			fails++
			b.sleep(backoff(fails))
			continue
		}
		if fails > 0 {
			b.log.Info("redis subscription back", "after", fails)
			b.stats.reconnects.Add(1)
			fails = 0
		}
		b.lastRx.Store(time.Now().UnixNano())
		switch m := msg.(type) {
		case *redis.Subscription:
			ws, ok := b.workspaceOf(m.Channel)
			if !ok || m.Kind != "subscribe" && m.Kind != "unsubscribe" {
				continue
			}
			b.mu.Lock()
			if m.Kind == "subscribe" {
				b.confirmed[ws] = true
			} else {
				delete(b.confirmed, ws)
			}
			b.mu.Unlock()
			if m.Kind == "subscribe" {
				b.Resync(ws)
			}
		case *redis.Message:
			ws, ok := b.workspaceOf(m.Channel)
			if !ok {
				continue
			}
			var env envelope
			if err := json.Unmarshal([]byte(m.Payload), &env); err != nil {
				b.log.Warn("redisbus: undecodable message; resyncing", "channel", m.Channel, "err", err)
				b.Resync(ws)
				continue
			}
			if env.From == b.id {
				continue // delivered locally when published
			}
			b.stats.received.Add(1)
			facts := env.Facts[:0]
			for _, f := range env.Facts {
				if f.WorkspaceID == ws { // a message never speaks for another workspace
					facts = append(facts, f)
				}
			}
			b.deliver(ws, facts)
		}
	}
}

// health pings a silent subscription and replaces one that does not
// answer, which go-redis would otherwise only notice when TCP gives up.
func (b *Bus) health() {
	defer b.wg.Done()
	t := time.NewTicker(b.opts.HealthInterval)
	defer t.Stop()
	var pingedAt int64
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
		last := b.lastRx.Load()
		now := time.Now().UnixNano()
		switch {
		case now-last < int64(b.opts.HealthInterval):
			pingedAt = 0
		case pingedAt == 0 || last > pingedAt:
			pingedAt = now
			ctx, cancel := context.WithTimeout(b.ctx, b.opts.HealthInterval)
			_ = b.current().Ping(ctx)
			cancel()
		default:
			b.log.Warn("redis subscription silent; reconnecting")
			b.replace()
			pingedAt = 0
		}
	}
}

// replace swaps in a fresh subscription and resubscribes every wanted
// workspace on it (each confirmation resyncs its workspace).
func (b *Bus) replace() {
	b.psMu.Lock()
	if b.ctx.Err() != nil { // closing: Close owns the last subscription
		b.psMu.Unlock()
		return
	}
	old := b.ps
	b.ps = b.rdb.Subscribe(b.ctx)
	b.subscribed = map[string]bool{}
	b.psMu.Unlock()
	b.lastRx.Store(time.Now().UnixNano())
	_ = old.Close()
	b.stats.reconnects.Add(1)
	b.kickReconcile()
}

func (b *Bus) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-b.ctx.Done():
	}
}

func backoff(fails int) time.Duration {
	d := 50 * time.Millisecond << min(fails, 5)
	return min(d, time.Second)
}

// Workspaces reports how many workspaces have local subscribers.
func (b *Bus) Workspaces() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.subs)
}

// Stats are cumulative counters for metrics and tests.
type Stats struct {
	Published       int64 // messages published to Redis
	PublishFailures int64 // Publish calls that did not reach Redis
	Received        int64 // messages received from other replicas
	Resyncs         int64 // workspace resyncs handed to subscribers
	Reconnects      int64 // subscription reconnects noticed
}

// Stats returns a snapshot of the counters.
func (b *Bus) Stats() Stats {
	return Stats{
		Published: b.stats.published.Load(), PublishFailures: b.stats.publishFailures.Load(),
		Received: b.stats.received.Load(), Resyncs: b.stats.resyncs.Load(),
		Reconnects: b.stats.reconnects.Load(),
	}
}
