package host

import (
	"context"
	"sync"
)

// publisher is the post-commit fast path. Facts are published in commit
// order per session by a goroutine per busy session, so a slow observer
// (a Redis round trip) never delays the next commit of that session or any
// other. Each goroutine exits when its session's queue is empty.
type publisher struct {
	mu     sync.Mutex
	queues map[string]*pubQueue
	// busy counts queued batches; idle is broadcast when it drops to 0.
	busy int
	idle *sync.Cond
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
func (h *Host) publish(ctx context.Context, facts []Fact, ids []int64) {
	if h.observer == nil {
		return
	}
	p := &h.pub
	key := facts[0].WorkspaceID + "/" + facts[0].SessionID
	b := pubBatch{ctx: context.WithoutCancel(ctx), facts: facts, ids: ids}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.queues == nil {
		p.queues, p.idle = map[string]*pubQueue{}, sync.NewCond(&p.mu)
	}
	p.busy++
	if q := p.queues[key]; q != nil {
		q.batches = append(q.batches, b)
		return
	}
	q := &pubQueue{batches: []pubBatch{b}}
	p.queues[key] = q
	go h.publishQueued(key, q)
}

func (h *Host) publishQueued(key string, q *pubQueue) {
	p := &h.pub
	for {
		p.mu.Lock()
		if len(q.batches) == 0 {
			delete(p.queues, key)
			p.mu.Unlock()
			return
		}
		b := q.batches[0]
		p.mu.Unlock()
		h.publishNow(b)
		p.mu.Lock()
		q.batches = q.batches[1:]
		p.busy--
		if p.busy == 0 {
			p.idle.Broadcast()
		}
		p.mu.Unlock()
	}
}

// publishNow delivers one batch. Rows it delivered are remembered so the
// relay only marks them instead of publishing them a second time; a
// failure is logged, never returned: the outbox row keeps the fact and
// the relay republishes it.
func (h *Host) publishNow(b pubBatch) {
	if err := h.observer.Publish(b.ctx, b.facts); err != nil {
		h.log.Warn("publish facts failed; the outbox relay will retry", "err", err)
		return
	}
	h.pubMu.Lock()
	for _, id := range b.ids {
		h.published[id] = true
	}
	h.pubMu.Unlock()
}

// FlushPublish waits until every fact committed so far went through the
// fast path (delivered or failed): for shutdown and tests.
func (h *Host) FlushPublish() {
	p := &h.pub
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.busy > 0 {
		p.idle.Wait()
	}
}
