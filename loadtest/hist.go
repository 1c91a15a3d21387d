package loadtest

import (
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Latency is a concurrency-safe HDR histogram of durations, recorded in
// microseconds from 1 µs to 10 minutes with 3 significant digits.
type Latency struct {
	mu sync.Mutex
	h  *hdrhistogram.Histogram
}

const maxLatencyMicros = int64(10 * time.Minute / time.Microsecond)

// NewLatency returns an empty histogram.
func NewLatency() *Latency {
	return &Latency{h: hdrhistogram.New(1, maxLatencyMicros, 3)}
}

// Record adds one observation. Values below 1 µs count as 1 µs (clocks of
// two processes may disagree by less than that), above the range as the
// maximum.
func (l *Latency) Record(d time.Duration) {
	v := max(int64(d/time.Microsecond), 1)
	v = min(v, maxLatencyMicros)
	l.mu.Lock()
	_ = l.h.RecordValue(v)
	l.mu.Unlock()
}

// Merge adds every observation of o.
func (l *Latency) Merge(o *Latency) {
	o.mu.Lock()
	snap := o.h.Export()
	o.mu.Unlock()
	other := hdrhistogram.Import(snap)
	l.mu.Lock()
	l.h.Merge(other)
	l.mu.Unlock()
}

// Count is the number of observations.
func (l *Latency) Count() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.h.TotalCount()
}

// Summary is a histogram's percentiles, in milliseconds.
type Summary struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"meanMs"`
	P50   float64 `json:"p50Ms"`
	P90   float64 `json:"p90Ms"`
	P99   float64 `json:"p99Ms"`
	P999  float64 `json:"p999Ms"`
	Max   float64 `json:"maxMs"`
}

// Summary reads the percentiles.
func (l *Latency) Summary() Summary {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.h.TotalCount() == 0 {
		return Summary{}
	}
	ms := func(us int64) float64 { return float64(us) / 1000 }
	return Summary{
		Count: l.h.TotalCount(),
		Mean:  l.h.Mean() / 1000,
		P50:   ms(l.h.ValueAtQuantile(50)),
		P90:   ms(l.h.ValueAtQuantile(90)),
		P99:   ms(l.h.ValueAtQuantile(99)),
		P999:  ms(l.h.ValueAtQuantile(99.9)),
		Max:   ms(l.h.Max()),
	}
}

// Timeline counts events per second since its start, for throughput over
// time.
type Timeline struct {
	mu      sync.Mutex
	start   time.Time
	buckets []int64
	total   int64
}

// NewTimeline starts counting now.
func NewTimeline() *Timeline { return &Timeline{start: time.Now()} }

// Add counts n events now.
func (t *Timeline) Add(n int64) { t.AddAt(time.Now(), n) }

// AddAt counts n events at a given time.
func (t *Timeline) AddAt(at time.Time, n int64) {
	i := int(at.Sub(t.start) / time.Second)
	if i < 0 {
		i = 0
	}
	if i > 24*3600 {
		i = 24 * 3600
	}
	t.mu.Lock()
	for len(t.buckets) <= i {
		t.buckets = append(t.buckets, 0)
	}
	t.buckets[i] += n
	t.total += n
	t.mu.Unlock()
}

// Total is the number of events counted.
func (t *Timeline) Total() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total
}

// PerSecond is the count in each whole second since the start.
func (t *Timeline) PerSecond() []int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]int64(nil), t.buckets...)
}

// Restart forgets every count and starts counting now.
func (t *Timeline) Restart() {
	t.mu.Lock()
	t.start, t.buckets, t.total = time.Now(), nil, 0
	t.mu.Unlock()
}
