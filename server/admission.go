package server

import (
	"math/rand/v2"
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
	// Full jitter over a window that grows with the pressure: the more
	// clients are waiting, the wider they are spread.
	now := time.Now().UnixNano()
	if last := s.lastRefusal.Swap(now); now-last > int64(time.Second) {
		s.subscribeRefused.Store(0) // a new storm: the window starts small again
	}
	refused := s.subscribeRefused.Add(1)
	window := min(time.Duration(refused)*time.Millisecond, 5*time.Second) + 100*time.Millisecond
	return nil, &retryLater{after: 50*time.Millisecond + rand.N(window), err: &host.Error{Code: host.CodeUnavailable,
		Reason: "busy", Message: "this replica is admitting other subscribes; retry after retryAfterMs"}}
}
