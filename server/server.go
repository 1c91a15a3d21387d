// Package server is the transport: HTTP routes (gorilla/mux) and the
// WebSocket endpoint (coder/websocket). It decodes, authorizes, calls the
// Host through its public methods, and encodes; it decides nothing.
package server

import (
	"context"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ensemble-dev/ensemble/auth"
	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/hub"
	"github.com/ensemble-dev/ensemble/protocol"
)

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Config wires a Server. Host, Hub and Verifier are required.
type Config struct {
	Host     *host.Host
	Hub      *hub.Hub
	Verifier auth.Verifier
	// Web holds the static GUI served at /; nil serves nothing there.
	Web    fs.FS
	Logger *slog.Logger
	// Ready reports whether the server can serve (nil: ready). By default
	// the Host must have finished recovery and the store must answer.
	Ready func(ctx context.Context) error
	// Registry receives the metrics; a new one by default. /metrics serves
	// exactly this registry.
	Registry *prometheus.Registry
	// OriginPatterns are the browser origins allowed to open the
	// WebSocket besides the server's own (same-origin is always allowed; a
	// request without Origin is not from a browser). A pattern is a host
	// ("app.example.com", "*.example.com") or, with "://", a scheme and
	// host ("https://app.example.com"), matched with path.Match.
	OriginPatterns []string
	// Limits bound each client (zero fields: DefaultLimits).
	Limits Limits
	// TokenLeeway is how long a WebSocket stays open past its token's exp:
	// the verifier's leeway, so a token Verify still accepts is not
	// refused by the close (default auth.DefaultLeeway).
	TokenLeeway time.Duration
	// ReconnectJitter bounds the random delay a draining replica gives
	// each client before it reconnects elsewhere (default 5s).
	ReconnectJitter time.Duration
}

// Server is the http.Handler for the whole API.
type Server struct {
	cfg     Config
	log     *slog.Logger
	router  *mux.Router
	metrics *metrics

	mu       sync.Mutex
	draining atomic.Bool
	active   sync.WaitGroup // WebSocket handlers

	limits       Limits
	conns        *connCounter  // open WebSocket connections per user
	httpLimiters *userLimiters // HTTP request rate per user
	pendingHello atomic.Int64  // upgraded connections still waiting for hello
	inFlight     atomic.Int64  // WebSocket requests running

	subscribeSlots   chan struct{} // admission of subscribes (admission.go)
	subscribeRefused atomic.Int64
	lastRefusal      atomic.Int64

	// onRequest, when set (tests only), runs at the start of every
	// WebSocket request handler.
	onRequest atomic.Pointer[func(op string)]
}

// New builds the handler and its routes.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	own := cfg.Registry == nil
	if own {
		cfg.Registry = prometheus.NewRegistry()
	}
	s := &Server{cfg: cfg, log: cfg.Logger, limits: cfg.Limits.withDefaults()}
	s.conns = &connCounter{max: s.limits.MaxConnsPerUser}
	s.subscribeSlots = make(chan struct{}, s.limits.MaxSubscribes)
	s.httpLimiters = &userLimiters{limit: limitOf(s.limits.HTTPRate), burst: s.limits.HTTPBurst}
	if s.cfg.Ready == nil {
		s.cfg.Ready = s.hostReady
	}
	s.metrics = newMetrics(cfg.Registry, own, cfg.Hub)
	s.router = s.routes()
	return s
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.router.ServeHTTP(w, r) }

// enter registers a WebSocket handler unless the server is draining.
func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining.Load() {
		return false
	}
	s.active.Add(1)
	return true
}

func (s *Server) routes() *mux.Router {
	r := mux.NewRouter()
	r.UseEncodedPath() // ids may contain escaped "/"; vars are unescaped in pathVar
	r.HandleFunc("/healthz", s.healthz).Methods(http.MethodGet, http.MethodHead)
	r.HandleFunc("/readyz", s.readyz).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/metrics", s.metrics.handler()).Methods(http.MethodGet)
	r.HandleFunc("/v1/ws", s.handleWS).Methods(http.MethodGet)
	r.HandleFunc("/v1/openapi.json", serveOpenAPI).Methods(http.MethodGet, http.MethodHead)
	s.restRoutes(r.PathPrefix("/v1/workspaces/{workspace}").Subrouter())
	r.PathPrefix("/v1/").Handler(http.HandlerFunc(notFoundJSON))
	if s.cfg.Web != nil {
		r.PathPrefix("/").Handler(http.FileServerFS(s.cfg.Web))
	}
	r.MethodNotAllowedHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeHTTPError(w, http.StatusMethodNotAllowed, protocol.Error{Code: protocol.CodeInvalidInput, Message: "method not allowed"})
	})
	return r
}

func notFoundJSON(w http.ResponseWriter, _ *http.Request) {
	writeHTTPError(w, http.StatusNotFound, protocol.Error{Code: protocol.CodeNotFound, Message: "no such route"})
}
