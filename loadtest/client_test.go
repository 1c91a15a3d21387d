package loadtest

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A refused upgrade's back-off hint reaches the caller, so a storm client
// waits it out instead of retrying on its own schedule.
func TestDialRefusalCarriesTheServersHint(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":{"code":"unavailable","message":"busy","retryable":true,"reason":"pending_hello","retryAfterMs":1234}}`))
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := Dial(ctx, strings.TrimPrefix(srv.URL, "http://"), "t", DialOptions{HTTPClient: srv.Client()})
	var we *WireError
	if !errors.As(err, &we) || we.RetryAfterMs != 1234 || we.Reason != "pending_hello" {
		t.Fatalf("err %v: want the server's WireError with retryAfterMs 1234", err)
	}
}
