package server

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/ensemble-dev/ensemble/hub"
	"github.com/ensemble-dev/ensemble/protocol"
)

// defaultReconnectJitter spreads the reconnects of a draining replica's
// clients: each is told to wait a uniform random delay below it, so the
// replicas that take them over see a ramp, not a cliff.
const defaultReconnectJitter = 5 * time.Second

func (s *Server) reconnectDelay() time.Duration {
	j := s.cfg.ReconnectJitter
	if j <= 0 {
		j = defaultReconnectJitter
	}
	return rand.N(j)
}

// sendReconnect tells one connection to reconnect elsewhere and closes it.
func (s *Server) sendReconnect(c *hub.Conn) {
	d := s.reconnectDelay()
	c.SendJSON(protocol.ReconnectFrame{Type: protocol.FrameReconnect, Reason: "draining", AfterMs: d.Milliseconds()})
	c.Close(hub.CloseShutdown, "server draining; reconnect in "+strconv.FormatInt(d.Milliseconds(), 10)+" ms")
}

// Shutdown drains the WebSocket side: it refuses new connections and new
// requests (unavailable, retryable), lets the requests in flight finish,
// then tells every client to reconnect elsewhere after a jittered delay
// and closes it with 4001, in bounded batches, and waits for the
// handlers. Hijacked connections are invisible to http.Server's own
// Shutdown, which is why this exists; run it alongside
// http.Server.Shutdown (which stops accepting and drains plain HTTP).
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.draining.Store(true)
	s.mu.Unlock()
	err := s.waitRequests(ctx)
	err = errors.Join(err, s.cfg.Hub.CloseConns(ctx, s.sendReconnect))
	done := make(chan struct{})
	go func() {
		s.active.Wait()
		close(done)
	}()
	select {
	case <-done:
		return err
	case <-ctx.Done():
		return errors.Join(err, ctx.Err())
	}
}

// waitRequests waits until no WebSocket request is running. New ones are
// refused while draining, so the count only falls; polling it briefly at
// shutdown costs less than tracking waiters on every request.
func (s *Server) waitRequests(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for s.inFlight.Load() > 0 {
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
