package loadtest

import (
	"math"
	"testing"
	"time"
)

func TestLatencySummary(t *testing.T) {
	l := NewLatency()
	if s := l.Summary(); s.Count != 0 || s.Max != 0 {
		t.Fatalf("empty summary = %+v", s)
	}
	for i := 1; i <= 1000; i++ {
		l.Record(time.Duration(i) * time.Millisecond)
	}
	s := l.Summary()
	near := func(name string, got, want float64) {
		if math.Abs(got-want) > want*0.002+0.001 {
			t.Errorf("%s = %v, want ≈ %v", name, got, want)
		}
	}
	if s.Count != 1000 {
		t.Errorf("count = %d", s.Count)
	}
	near("p50", s.P50, 500)
	near("p90", s.P90, 900)
	near("p99", s.P99, 990)
	near("p99.9", s.P999, 999)
	near("max", s.Max, 1000)
	near("mean", s.Mean, 500.5)

	o := NewLatency()
	o.Record(0)            // clamped to 1 µs
	o.Record(time.Hour)    // clamped to the range
	o.Record(-time.Second) // clamped to 1 µs
	l.Merge(o)
	if got := l.Count(); got != 1003 {
		t.Errorf("merged count = %d, want 1003", got)
	}
	if s := l.Summary(); s.Max < 599_000 {
		t.Errorf("merged max = %v ms, want the clamped hour", s.Max)
	}
}

func TestTimeline(t *testing.T) {
	tl := NewTimeline()
	tl.AddAt(tl.start, 2)
	tl.AddAt(tl.start.Add(2500*time.Millisecond), 5)
	tl.AddAt(tl.start.Add(-time.Second), 1) // before the start counts in the first second
	got := tl.PerSecond()
	if len(got) != 3 || got[0] != 3 || got[1] != 0 || got[2] != 5 || tl.Total() != 8 {
		t.Fatalf("per second = %v total %d", got, tl.Total())
	}
}
