package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/hub"
	"github.com/ensemble-dev/ensemble/redisbus"
)

// factBus is both ends of a bus: the Host publishes into it, the hub
// subscribes to it.
type factBus interface {
	host.Observer
	hub.Bus
}

// redisStartTimeout is how long serve waits for Redis to answer at start:
// a wrong --redis-url fails fast, while a later outage is tolerated.
const redisStartTimeout = 5 * time.Second

// openBus returns the in-process bus without --redis-url, the Redis bus
// (cluster mode) with it. close releases it.
func openBus(ctx context.Context, c serveConfig, log *slog.Logger) (factBus, func(), error) {
	if c.redisURL == "" {
		return hub.NewLocalBus(), func() {}, nil
	}
	b, err := redisbus.Open(ctx, c.redisURL, redisStartTimeout, redisbus.Options{Logger: log.With("component", "redisbus")})
	if err != nil {
		return nil, nil, err
	}
	log.Info("cluster mode: Redis bus", "redis", redactURL(c.redisURL))
	return b, func() { _ = b.Close() }, nil
}

// startCluster turns on session ownership when the bus is Redis: commands
// for a session owned by another replica are forwarded to it, and leases
// are renewed (and dead owners' sessions adopted) until the returned stop
// is called, which also releases this replica's leases. It must run before
// recovery. Without Redis it does nothing.
func startCluster(ctx context.Context, c serveConfig, bus factBus, h *host.Host, log *slog.Logger) (stop func(), err error) {
	rb, ok := bus.(*redisbus.Bus)
	if !ok {
		return func() {}, nil
	}
	router, err := rb.NewRouter(ctx, h.Epoch(), h.ServeForwarded, redisbus.RouterOptions{})
	if err != nil {
		return nil, err
	}
	h.ConfigureCluster(host.ClusterConfig{Forwarder: router, LeaseTTL: c.sessionLease})
	octx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); h.RunOwnership(octx) }()
	log.Info("cluster mode: session ownership", "epoch", h.Epoch(), "lease", c.sessionLease)
	return func() {
		cancel()
		<-done
		_ = router.Close()
	}, nil
}
