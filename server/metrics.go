package server

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ensemble-dev/ensemble/hub"
)

type metrics struct {
	reg          *prometheus.Registry
	requests     *prometheus.CounterVec
	wsOpened     prometheus.Counter
	authFailures *prometheus.CounterVec
	limited      *prometheus.CounterVec
}

// newMetrics registers the server's metrics; runtime collectors only on a
// registry the server created (a caller's may already have them).
func newMetrics(reg *prometheus.Registry, own bool, h *hub.Hub) *metrics {
	m := &metrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ensemble_requests_total",
			Help: "Operations handled, by transport, operation and result code (ok on success).",
		}, []string{"transport", "op", "code"}),
		wsOpened: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ensemble_ws_connections_opened_total",
			Help: "Authenticated WebSocket connections opened.",
		}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ensemble_auth_failures_total",
			Help: "Refused tokens, by transport and reason (missing, invalid, expired, no_hello).",
		}, []string{"transport", "reason"}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ensemble_limit_rejections_total",
			Help: "Requests or connections refused by a limit, by limit (docs/security.md).",
		}, []string{"limit"}),
	}
	stat := func() hub.Stats { return h.Stats() }
	reg.MustRegister(
		m.requests, m.wsOpened, m.authFailures, m.limited,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ensemble_ws_connections",
			Help: "Open WebSocket connections."}, func() float64 { return float64(stat().Connections) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ensemble_hub_topics",
			Help: "Live hub topics (including lingering ones)."}, func() float64 { return float64(stat().Topics) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ensemble_hub_rereads_total",
			Help: "Canonical-state rereads by the hub (one per dirty topic, however many watchers)."},
			func() float64 { return float64(stat().Rereads) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ensemble_hub_events_total",
			Help: "Events encoded by the hub (each encoded once)."}, func() float64 { return float64(stat().Events) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ensemble_hub_events_fanned_out_total",
			Help: "Event frames queued to watchers."}, func() float64 { return float64(stat().FramesFanned) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ensemble_hub_slow_consumers_total",
			Help: "Connections closed with 4008 because they fell behind."}, func() float64 { return float64(stat().SlowConsumers) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ensemble_hub_deltas_applied_total",
			Help: "Committed transcript deltas applied without a store read."}, func() float64 { return float64(stat().DeltasApplied) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ensemble_hub_delta_duplicates_total",
			Help: "Deltas dropped because the topic already held them."}, func() float64 { return float64(stat().DeltaDuplicates) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ensemble_hub_delta_gaps_total",
			Help: "Deltas that did not follow the topic's version and caused a reread."}, func() float64 { return float64(stat().DeltaGapRereads) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ensemble_hub_typed_turns_total",
			Help: "Turn facts applied from the committed Turn they carry, without a store read."}, func() float64 { return float64(stat().TypedTurns) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ensemble_hub_writes_total",
			Help: "WebSocket frames the hub wrote to watchers (one write each)."}, func() float64 { return float64(stat().Writes) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ensemble_hub_frames_written_total",
			Help: "Queued frames those writes carried (several per write for ensemble.v2 clients)."}, func() float64 { return float64(stat().FramesWritten) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ensemble_hub_inline_writes_total",
			Help: "Of those writes, the ones made on the goroutine that applied a delta (the socket took them at once)."}, func() float64 { return float64(stat().InlineWrites) }),
	)
	if own {
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

func (m *metrics) request(transport, op, code string) {
	m.requests.WithLabelValues(transport, opLabel(op), code).Inc()
}

func (m *metrics) authFailure(transport, reason string) {
	m.authFailures.WithLabelValues(transport, reason).Inc()
}

func (m *metrics) limit(name string) { m.limited.WithLabelValues(name).Inc() }
