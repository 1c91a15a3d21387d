package server

import (
	"net/http"
	"time"
)

// HTTPTimeouts bound what a client can hold on the HTTP side (zero fields
// take the defaults). A WebSocket is exempt once upgraded: its deadlines
// are cleared at the hijack and the hub's own write timeout and idle
// close take over.
type HTTPTimeouts struct {
	// ReadHeader bounds reading the request line and headers.
	ReadHeader time.Duration
	// Read bounds reading the whole request, body included: a body that
	// trickles in is cut and answered, never held.
	Read time.Duration
	// Write bounds the handler and its response from the end of the
	// request headers.
	Write time.Duration
	// Idle closes a keep-alive connection that sends no next request.
	Idle time.Duration
}

// DefaultHTTPTimeouts are the timeouts of a server configured with none.
func DefaultHTTPTimeouts() HTTPTimeouts {
	return HTTPTimeouts{ReadHeader: 10 * time.Second, Read: 30 * time.Second, Write: 60 * time.Second, Idle: 60 * time.Second}
}

// HTTPServer is the http.Server for h with these timeouts.
func (t HTTPTimeouts) HTTPServer(h http.Handler) *http.Server {
	d := DefaultHTTPTimeouts()
	pick := func(v, def time.Duration) time.Duration {
		if v <= 0 {
			return def
		}
		return v
	}
	return &http.Server{Handler: h,
		ReadHeaderTimeout: pick(t.ReadHeader, d.ReadHeader), ReadTimeout: pick(t.Read, d.Read),
		WriteTimeout: pick(t.Write, d.Write), IdleTimeout: pick(t.Idle, d.Idle)}
}
