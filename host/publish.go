package host

import (
	"context"
	"log/slog"
	"sync"
)

// publisher is the post-commit fast path. Facts are published in commit
// order per session by a goroutine per busy session, so a slow observer
// (a Redis round trip) never delays the next commit of that session or any
// other. Each goroutine exits when its session's queue is empty.
type publisher struct {
	observer Observer // nil: nothing is published
	// inline: the observer never waits on I/O, so an idle session's batch
	// is delivered on the committing goroutine (InlineObserver).
	inline bool
	log    *slog.Logger

	mu     sync.Mutex
	queues map[string]*pubQueue
	// busy counts queued batches; idle is broadcast when it drops to 0.
	busy int
	idle *sync.Cond

	// delivered holds the outbox ids the fast path published, for the
	// relay to mark (relay_cluster.go) instead of publishing them again.
	deliveredMu sync.Mutex
	delivered   map[int64]bool
}

type pubQueue struct {
	batches []pubBatch
}

type pubBatch struct {
	ctx   context.Context
	facts []Fact
	ids   []int64
}

// publish queues one committed transaction's facts behind the earlier ones
// of the same session.
func (p *publisher) publish(ctx context.Context, facts []Fact, ids []int64) {
	if p.observer == nil {
		return
	}
	key := facts[0].WorkspaceID + "/" + facts[0].SessionID
	b := pubBatch{ctx: context.WithoutCancel(ctx), facts: facts, ids: ids}
	p.mu.Lock()
	if p.queues == nil {
		p.queues, p.idle = map[string]*pubQueue{}, sync.NewCond(&p.mu)
	}
	p.busy++
	if q := p.queues[key]; q != nil {
		q.batches = append(q.batches, b)
		p.mu.Unlock()
		return
	}
	q := &pubQueue{batches: []pubBatch{b}}
	p.queues[key] = q
	p.mu.Unlock()
	if p.inline {
		p.drain(key, q)
		return
	}
	go p.drain(key, q)
}

func (p *publisher) drain(key string, q *pubQueue) {
	for {
		p.mu.Lock()
		if len(q.batches) == 0 {
			delete(p.queues, key)
			p.mu.Unlock()
			return
		}
		b := q.batches[0]
		p.mu.Unlock()
		p.deliver(b)
		p.mu.Lock()
		q.batches = q.batches[1:]
		p.busy--
		if p.busy == 0 {
			p.idle.Broadcast()
		}
		p.mu.Unlock()
	}
}

// deliver publishes one batch. Rows it delivered are remembered so the
// relay only marks them instead of publishing them a second time; a
// failure is logged, never returned: the outbox row keeps the fact and
// the relay republishes it.
func (p *publisher) deliver(b pubBatch) {
	if err := p.observer.Publish(b.ctx, b.facts); err != nil {
		p.log.Warn("publish facts failed; the outbox relay will retry", "err", err)
		return
	}
	p.deliveredMu.Lock()
	for _, id := range b.ids {
		p.delivered[id] = true
	}
	p.deliveredMu.Unlock()
}

// flush waits until every batch queued so far was delivered or failed.
func (p *publisher) flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.busy > 0 {
		p.idle.Wait()
	}
}

// takeDelivered returns and forgets the outbox ids the fast path delivered.
func (p *publisher) takeDelivered() []int64 {
	p.deliveredMu.Lock()
	defer p.deliveredMu.Unlock()
	ids := make([]int64, 0, len(p.delivered))
	for id := range p.delivered {
		ids = append(ids, id)
	}
	clear(p.delivered)
	return ids
}

// keepDelivered remembers ids again (marking them failed; the next relay
// round retries).
func (p *publisher) keepDelivered(ids []int64) {
	p.deliveredMu.Lock()
	defer p.deliveredMu.Unlock()
	for _, id := range ids {
		p.delivered[id] = true
	}
}

// undelivered returns the facts of rows the fast path did not deliver, and
// forgets every row's id: the relay publishes and marks them itself. The
// facts of one row share its id, so ids are forgotten only after all were
// looked up.
func (p *publisher) undelivered(rows []OutboxRow) []Fact {
	p.deliveredMu.Lock()
	defer p.deliveredMu.Unlock()
	var facts []Fact
	for _, r := range rows {
		if !p.delivered[r.ID] {
			facts = append(facts, r.Fact)
		}
	}
	for _, r := range rows {
		delete(p.delivered, r.ID)
	}
	return facts
}

// FlushPublish waits until every fact committed so far went through the
// fast path (delivered or failed): for shutdown and tests.
func (h *Host) FlushPublish() { h.pub.flush() }
