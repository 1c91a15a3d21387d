package server

import (
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// Subscribes are what a reconnect storm is made of: each may build a
// snapshot or replay a window. At most Limits.MaxSubscribes run at once
// on a replica; the rest are answered unavailable with a retryAfterMs hint
// (jittered, growing with the queue of refusals) that clients obey, so a
// storm is admitted at the pace the replica can serve while live traffic
// keeps its share of the CPU.

// retryLater is a retryable refusal with a back-off hint.
type retryLater struct {
	err   *host.Error
	after time.Duration
}

func (e *retryLater) Error() string { return e.err.Error() }
func (e *retryLater) Unwrap() error { return e.err }

// admitSubscribe takes a subscribe slot; release it when the subscribe has
// answered. ok is false when the replica is at its limit.
func (s *Server) admitSubscribe() (release func(), err error) {
	select {
	case s.subscribeSlots <- struct{}{}:
		return func() { <-s.subscribeSlots }, nil
	default:
	}
	s.metrics.limit("subscribes")
	return nil, &retryLater{after: s.refusalBackoff(), err: &host.Error{Code: host.CodeUnavailable,
		Reason: "busy", Message: "this replica is admitting other subscribes; retry after retryAfterMs"}}
}

// refusalBackoff is the hint of one storm refusal (a subscribe over
// MaxSubscribes, an upgrade over MaxPendingHello): full jitter over a
// window that grows with the refusals of the current storm, so the more
// clients are waiting, the wider they are spread. Both refusals count
// toward the same storm.
func (s *Server) refusalBackoff() time.Duration {
	now := time.Now().UnixNano()
	if last := s.lastRefusal.Swap(now); now-last > int64(time.Second) {
		s.subscribeRefused.Store(0) // a new storm: the window starts small again
	}
	refused := s.subscribeRefused.Add(1)
	window := min(time.Duration(refused)*time.Millisecond, 5*time.Second) + 100*time.Millisecond
	return 50*time.Millisecond + rand.N(window)
}

// helloGate sizes the bound on connections waiting for their hello from
// the hellos this replica completes per second: a connection admitted
// beyond what it can authenticate within the hello deadline is upgraded,
// held for the deadline and closed, and then retried — the most expensive
// way to refuse it. Beyond the measured bound the upgrade is refused
// cheaply (503 with retryAfterMs) before it happens.
type helloGate struct {
	done    atomic.Int64 // hellos completed (ok or not) since windowAt
	window  atomic.Int64 // unix nanos the current window began
	perSec  atomic.Int64 // smoothed hellos per second (×16, fixed point)
	started atomic.Bool  // one window measured: perSec means something
}

// helloGateFloor keeps the bound from collapsing on an idle replica,
// whose measured rate is near zero when a storm begins.
const helloGateFloor = 128

// completed counts one hello (answered or failed) and rolls the
// one-second window into the smoothed rate.
func (g *helloGate) completed(now time.Time) {
	g.done.Add(1)
	n := now.UnixNano()
	start := g.window.Load()
	if start == 0 {
		g.window.CompareAndSwap(0, n)
		return
	}
	el := n - start
	if el < int64(time.Second) || !g.window.CompareAndSwap(start, n) {
		return
	}
	rate := g.done.Swap(0) * 16 * int64(time.Second) / el
	if !g.started.Swap(true) {
		g.perSec.Store(rate)
		return
	}
	old := g.perSec.Load()
	g.perSec.Store(old + (rate-old)/2) // a storm changes the rate within seconds
}

// limit is how many connections may wait for their hello: what the
// replica completes in half the deadline at its measured rate, at least
// the floor and at most max.
func (g *helloGate) limit(bound int, deadline time.Duration) int64 {
	if !g.started.Load() {
		return int64(bound)
	}
	n := g.perSec.Load() * int64(deadline/2) / int64(time.Second) / 16
	return min(int64(bound), max(n, helloGateFloor))
}
