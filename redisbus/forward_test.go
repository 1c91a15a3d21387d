package redisbus

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

func echo(_ context.Context, req host.ForwardRequest) host.ForwardReply {
	if req.Op == "fail" {
		return host.ForwardReply{Error: &host.ForwardError{Code: host.CodeSessionBusy, Message: "busy", Reason: "turn_active"}}
	}
	return host.ForwardReply{Result: req.Input}
}

func newRouter(t *testing.T, b *Bus, self string, opts RouterOptions) *Router {
	t.Helper()
	r, err := b.NewRouter(context.Background(), self, echo, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// Commands forwarded to a live owner come back answered, concurrently and
// each to its own caller; typed errors survive the trip.
func TestForwardToOwner(t *testing.T) {
	url := redisURL(t)
	p := prefix()
	a, b := newBus(t, url, p, "fw-a"), newBus(t, url, p, "fw-b")
	newRouter(t, a, "epA", RouterOptions{})
	rb := newRouter(t, b, "epB", RouterOptions{})

	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 100 {
		wg.Go(func() {
			in, _ := json.Marshal(map[string]int{"n": i})
			rep, err := rb.Forward(context.Background(), "epA", host.ForwardRequest{Op: "echo", Input: in})
			if err != nil {
				errs <- err
				return
			}
			var out map[string]int
			if err := json.Unmarshal(rep.Result, &out); err != nil || out["n"] != i {
				errs <- errors.New("wrong reply: " + string(rep.Result))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	rep, err := rb.Forward(context.Background(), "epA", host.ForwardRequest{Op: "fail", Input: json.RawMessage(`{}`)})
	if err != nil || rep.Error == nil || rep.Error.Code != host.CodeSessionBusy || rep.Error.Reason != "turn_active" {
		t.Fatalf("typed error: %+v %v", rep, err)
	}
}

// A request nobody takes (its owner is gone) is withdrawn and reported as
// not delivered, so the caller knows nothing happened.
func TestForwardToGoneOwnerIsNotDelivered(t *testing.T) {
	url := redisURL(t)
	b := newBus(t, url, prefix(), "fw-gone")
	rb := newRouter(t, b, "epB", RouterOptions{PickupTimeout: 200 * time.Millisecond})
	_, err := rb.Forward(context.Background(), "epGone", host.ForwardRequest{Op: "echo", Input: json.RawMessage(`{}`)})
	if !errors.Is(err, host.ErrNotDelivered) {
		t.Fatalf("forward to a gone owner: %v", err)
	}
	if n, err := b.Client().LLen(context.Background(), b.Prefix()+"rpc:epGone").Result(); err != nil || n != 0 {
		t.Fatalf("the withdrawn request is still queued: %d %v", n, err)
	}
}
