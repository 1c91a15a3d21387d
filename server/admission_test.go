package server

import (
	"testing"
	"time"
)

// The bound on connections waiting for hello follows the hellos the
// replica completes: unbounded by measurement until one window is
// measured, then what half the deadline holds at the measured rate,
// never under the floor nor over the configured limit.
func TestHelloGateSizesTheBoundFromThroughput(t *testing.T) {
	var g helloGate
	if got := g.limit(1024, 5*time.Second); got != 1024 {
		t.Fatalf("before any measurement: %d, want the configured 1024", got)
	}
	t0 := time.Unix(1000, 0)
	g.completed(t0)
	// 200 hellos in the first second: 200/s × 2.5 s = 500.
	for i := 1; i <= 200; i++ {
		g.completed(t0.Add(time.Duration(i) * time.Second / 200))
	}
	if got := g.limit(1024, 5*time.Second); got < 450 || got > 550 {
		t.Fatalf("at ~200 hellos/s: %d, want ~500", got)
	}
	if got := g.limit(300, 5*time.Second); got != 300 {
		t.Fatalf("over the configured limit: %d, want 300", got)
	}
	// A slow second (10 hellos) pulls the smoothed rate down, but not
	// under the floor.
	t1 := t0.Add(time.Second)
	for i := 1; i <= 10; i++ {
		g.completed(t1.Add(time.Duration(i) * time.Second / 10))
	}
	got := g.limit(1024, 5*time.Second)
	if got >= 450 || got < helloGateFloor {
		t.Fatalf("after a slow second: %d, want below 450 and at least %d", got, helloGateFloor)
	}
	for k := 2; k < 10; k++ {
		g.completed(t0.Add(time.Duration(k) * time.Second))
	}
	if got := g.limit(1024, 5*time.Second); got != helloGateFloor {
		t.Fatalf("at 1 hello/s: %d, want the floor %d", got, helloGateFloor)
	}
}
