package main

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/redisbus"
	"github.com/ensemble-dev/ensemble/sqlite"
)

// metricsRegistry is the registry /metrics serves: the process's runtime
// collectors, SQLite's group commit counters on an embedded store, and in
// cluster mode the Redis bus's counters and the session leases this
// replica holds (the server adds its own metrics to it).
func metricsRegistry(rb *redisbus.Bus, h *host.Host, store host.Store) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if st, ok := store.(*sqlite.Store); ok {
		gc := statsCounter(st.GroupCommitStats)
		reg.MustRegister(
			gc("ensemble_sqlite_commits_total", "SQLite write transactions committed (group commit: several updates may share one).",
				func(s sqlite.GroupCommitStats) int64 { return s.Commits }),
			gc("ensemble_sqlite_updates_committed_total", "Store updates those commits made durable; ÷ commits is the mean group size.",
				func(s sqlite.GroupCommitStats) int64 { return s.Updates }),
		)
	}
	if rb == nil {
		return reg
	}
	counter := statsCounter(rb.Stats)
	reg.MustRegister(
		counter("ensemble_bus_published_total", "Fact messages published to Redis.",
			func(s redisbus.Stats) int64 { return s.Published }),
		counter("ensemble_bus_publish_failures_total", "Publishes that did not reach Redis (the outbox relay republishes them).",
			func(s redisbus.Stats) int64 { return s.PublishFailures }),
		counter("ensemble_bus_received_total", "Fact messages received from other replicas.",
			func(s redisbus.Stats) int64 { return s.Received }),
		counter("ensemble_bus_resyncs_total", "Workspace resyncs after a Redis (re)subscription.",
			func(s redisbus.Stats) int64 { return s.Resyncs }),
		counter("ensemble_bus_reconnects_total", "Redis subscription reconnects noticed.",
			func(s redisbus.Stats) int64 { return s.Reconnects }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ensemble_session_leases_held",
			Help: "Sessions whose runtime this replica owns."}, func() float64 { return float64(h.HeldLeases()) }),
	)
	return reg
}

// statsCounter makes counters that read one field of a component's stats
// snapshot at each scrape.
func statsCounter[S any](stats func() S) func(name, help string, field func(S) int64) prometheus.Collector {
	return func(name, help string, field func(S) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(field(stats())) })
	}
}
