package server

import (
	"context"
	"net/http"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// healthz answers while the process is up.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz answers 200 only when the server can serve.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if s.draining.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "shutting down"})
		return
	}
	if err := s.cfg.Ready(ctx); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// hostReady: recovery finished and the store answers a read.
func (s *Server) hostReady(ctx context.Context) error {
	select {
	case <-s.cfg.Host.Ready():
	default:
		return &host.Error{Code: host.CodeUnavailable, Reason: "recovering", Message: "recovery has not finished"}
	}
	if err := s.cfg.Host.Ping(ctx); err != nil {
		return &host.Error{Code: host.CodeUnavailable, Reason: host.ReasonStoreUnavailable, Message: "store does not answer"}
	}
	return nil
}
