package hub

import (
	"context"
	"sync"

	"github.com/ensemble-dev/ensemble/host"
)

// Bus delivers post-commit facts for one workspace. It is the only thing the
// hub consumes from a bus, so the in-process bus and a Redis bus are
// interchangeable. fn gets the facts of one published batch (one commit's,
// in their order) in one call, so the hub writes their events to a watcher
// together. fn must return quickly and never block: the hub's own handler
// only marks topics dirty or applies typed facts in memory.
//
// The hub calls Subscribe and unsubscribe while holding its own lock, so
// they must not wait on I/O (a network bus subscribes in the background and
// sends a resync fact once the subscription is live).
//
// A fact with an empty SessionID means "resync this workspace" (a bus that
// lost messages, e.g. after a Redis reconnect, sends one per workspace).
type Bus interface {
	Subscribe(workspace string, fn func([]host.Fact)) (unsubscribe func())
}

// LocalBus is the in-process bus: host.Observer on one side, Bus on the
// other. Publish calls subscribers synchronously, outside the bus lock, so
// a subscriber may (un)subscribe from inside its callback.
type LocalBus struct {
	mu   sync.RWMutex
	next uint64
	subs map[string]map[uint64]func([]host.Fact)
}

var (
	_ host.InlineObserver = (*LocalBus)(nil)
	_ Bus                 = (*LocalBus)(nil)
)

// NewLocalBus returns an empty in-process bus.
func NewLocalBus() *LocalBus {
	return &LocalBus{subs: map[string]map[uint64]func([]host.Fact){}}
}

// Publish hands each fact to the subscribers of its workspace, a run of
// consecutive facts of one workspace in one call. It never fails: a fact
// with no subscriber is simply dropped (the canonical store keeps the
// state; facts are only wake-up hints).
func (b *LocalBus) Publish(_ context.Context, facts []host.Fact) error {
	var fns []func([]host.Fact)
	for len(facts) > 0 {
		n := 1
		for n < len(facts) && facts[n].WorkspaceID == facts[0].WorkspaceID {
			n++
		}
		run := facts[:n:n]
		facts = facts[n:]
		fns = fns[:0]
		b.mu.RLock()
		for _, fn := range b.subs[run[0].WorkspaceID] {
			fns = append(fns, fn)
		}
		b.mu.RUnlock()
		for _, fn := range fns {
			fn(run)
		}
	}
	return nil
}

// PublishesInline reports that Publish never waits on I/O (the hub's
// callback marks topics dirty or applies a delta in memory), so the Host
// may publish on the committing goroutine.
func (b *LocalBus) PublishesInline() bool { return true }

// Subscribe registers fn for one workspace's facts until unsubscribe is
// called. A callback may still run once after unsubscribe returns if a
// Publish was already in flight.
func (b *LocalBus) Subscribe(ws string, fn func([]host.Fact)) func() {
	b.mu.Lock()
	b.next++
	id := b.next
	m := b.subs[ws]
	if m == nil {
		m = map[uint64]func([]host.Fact){}
		b.subs[ws] = m
	}
	m[id] = fn
	b.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			delete(b.subs[ws], id)
			if len(b.subs[ws]) == 0 {
				delete(b.subs, ws)
			}
			b.mu.Unlock()
		})
	}
}

// Resync asks every subscriber of ws to reread its whole workspace.
func (b *LocalBus) Resync(ws string) {
	_ = b.Publish(context.Background(), []host.Fact{{WorkspaceID: ws, Kind: host.FactResync}})
}

// Workspaces reports how many workspaces have subscribers (for tests and
// metrics).
func (b *LocalBus) Workspaces() int {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return len(b.subs)
}
