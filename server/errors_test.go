package server

import (
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/protocol"
)

// Every unavailable answer names what is unavailable (issue 11): typed
// Host errors keep their reason, untyped store and timeout errors get one.
func TestUnavailableCarriesReason(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	cases := []struct {
		err    error
		reason string
	}{
		{fmt.Errorf("pg: conn reset: %w", host.ErrUnavailable), host.ReasonStoreUnavailable},
		{fmt.Errorf("op: %w", context.DeadlineExceeded), host.ReasonTimeout},
		{&host.Error{Code: host.CodeUnavailable, Reason: host.ReasonOwnerUnreachable, Message: "x"}, host.ReasonOwnerUnreachable},
	}
	for _, c := range cases {
		w := toWire(c.err, log, "test")
		if w.Code != protocol.CodeUnavailable || !w.Retryable || w.Reason != c.reason {
			t.Errorf("toWire(%v) = %+v, want unavailable/%s", c.err, w, c.reason)
		}
	}
}
