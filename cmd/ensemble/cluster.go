package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync/atomic"
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
// with it; rb is that Redis bus (nil without: not cluster mode), named
// apart so cluster wiring never depends on the bus's dynamic type. close
// releases it.
func openBus(ctx context.Context, c serveConfig, log *slog.Logger) (bus factBus, rb *redisbus.Bus, closeBus func(), err error) {
	if c.redisURL == "" {
		return hub.NewLocalBus(), nil, func() {}, nil
	}
	b, err := redisbus.Open(ctx, c.redisURL, redisStartTimeout, redisbus.Options{Logger: log.With("component", "redisbus")})
	if err != nil {
		return nil, nil, nil, err
	}
	log.Info("cluster mode: Redis bus", "redis", redactURL(c.redisURL))
	return b, b, func() { _ = b.Close() }, nil
}

// replicaCluster is this replica's share of cluster mode: the Host's cluster
// config, built before the Host because the router subscribes under the
// Host's epoch, and the router to close after the Host stopped.
type replicaCluster struct {
	epoch  string
	config *host.ClusterConfig
	router *redisbus.Router
	// host is set once the Host exists; a request arriving before that is
	// refused as unavailable (no replica can know this epoch yet anyway:
	// it is learnt from leases the Host takes later).
	host atomic.Pointer[host.Host]
}

// openCluster prepares session ownership when the bus is Redis: commands
// for a session owned by another replica are forwarded to it. Without
// Redis it returns nil and the Host runs alone.
func openCluster(ctx context.Context, c serveConfig, rb *redisbus.Bus) (*replicaCluster, error) {
	if rb == nil {
		return nil, nil
	}
	cl := &replicaCluster{epoch: host.RandomID("ep")}
	router, err := rb.NewRouter(ctx, cl.epoch, cl.serve, redisbus.RouterOptions{})
	if err != nil {
		return nil, err
	}
	cl.router = router
	cl.config = &host.ClusterConfig{Forwarder: router, LeaseTTL: c.sessionLease}
	return cl, nil
}

func (cl *replicaCluster) serve(ctx context.Context, req host.ForwardRequest) host.ForwardReply {
	h := cl.host.Load()
	if h == nil {
		return host.ForwardReply{Error: &host.ForwardError{Code: host.CodeUnavailable, Message: "replica is starting"}}
	}
	return h.ServeForwarded(ctx, req)
}

// start renews (and adopts dead owners') leases until the returned stop is
// called, which also releases this replica's leases and closes the router.
// It must run before recovery. A nil cluster does nothing.
func (cl *replicaCluster) start(ctx context.Context, h *host.Host, log *slog.Logger) (stop func()) {
	if cl == nil {
		return func() {}
	}
	cl.host.Store(h)
	octx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); h.RunOwnership(octx) }()
	log.Info("cluster mode: session ownership", "epoch", h.Epoch(), "lease", cl.config.LeaseTTL)
	return func() {
		cancel()
		<-done
		_ = cl.router.Close()
	}
}

// hostConfig returns the Host's cluster settings (nil: single replica).
func (cl *replicaCluster) hostConfig() (epoch string, cfg *host.ClusterConfig) {
	if cl == nil {
		return "", nil
	}
	return cl.epoch, cl.config
}

// presenceStore is where the hub shares presence: the Redis bus's store
// in cluster mode, the hub's in-process one otherwise (nil).
func presenceStore(rb *redisbus.Bus) hub.PresenceStore {
	if rb == nil {
		return nil
	}
	return redisPresence{rb.Presence()}
}

// redisPresence encodes the hub's entries for the bus's opaque blobs.
type redisPresence struct{ p *redisbus.Presence }

func (r redisPresence) Put(ctx context.Context, ws, replica string, entries []hub.PresenceEntry, ttl time.Duration) error {
	var blob []byte
	if len(entries) > 0 {
		var err error
		if blob, err = json.Marshal(entries); err != nil {
			return err
		}
	}
	return r.p.Put(ctx, ws, replica, blob, ttl)
}

func (r redisPresence) List(ctx context.Context, ws string) ([]hub.PresenceEntry, error) {
	blobs, err := r.p.List(ctx, ws)
	if err != nil {
		return nil, err
	}
	var out []hub.PresenceEntry
	for _, b := range blobs {
		var es []hub.PresenceEntry
		if err := json.Unmarshal(b, &es); err != nil {
			continue // a replica of another version: skip its entries, keep the rest
		}
		out = append(out, es...)
	}
	return out, nil
}
