package hub

import "time"

// Short jobs on connections (a read after a readiness event, a flush of
// queued frames) run on goroutines that outlive one job: a new goroutine
// starts with a small stack and grows it (a copy each time it doubles) to
// the ~8 KiB a WebSocket read or write needs, which at one heartbeat per
// connection every 25 s was a fifth of an idle server's CPU. A worker
// that finished a job waits a while for the next one and keeps its stack.
const (
	maxPooledWorkers = 64
	workerIdle       = 30 * time.Second
)

// spawn runs fn on an idle worker, or on a new goroutine that then joins
// the pool. Workers belong to the hub: they exit when it closes, when idle
// for workerIdle, or when the pool is full.
func (h *Hub) spawn(fn func()) {
	select {
	case h.jobs <- fn:
	default:
		go h.pooledWorker(fn)
	}
}

func (h *Hub) pooledWorker(fn func()) {
	fn()
	if h.pooled.Add(1) > maxPooledWorkers {
		h.pooled.Add(-1)
		return
	}
	defer h.pooled.Add(-1)
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		select {
		case fn := <-h.jobs:
			fn()
			idle.Reset(workerIdle)
		case <-idle.C:
			return
		case <-h.ctx.Done():
			return
		}
	}
}
