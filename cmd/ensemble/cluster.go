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
