package loadtest

import (
	"testing"
	"time"
)

func TestPlaceSplitFilesTheLastTenAtTheEnd(t *testing.T) {
	early, end, rest := NewLatency(), NewLatency(), NewLatency()
	p := newPlaceSplit(early, end, rest)
	// A 26-chunk answer: appended chunks at places 1…25, then its end.
	for place := 1; place <= 25; place++ {
		p.add("long", place, time.Duration(place)*time.Millisecond)
	}
	// A 6-chunk answer that ends: all five appended chunks are its end.
	for place := 1; place <= 5; place++ {
		p.add("short", place, 100*time.Millisecond)
	}
	p.ended("long")
	p.ended("short")
	// An answer still open when the run stops: filed by place alone.
	for place := 1; place <= 12; place++ {
		p.add("open", place, time.Millisecond)
	}
	p.flush()

	if got := early.Summary().Count; got != 9+9 {
		t.Errorf("early: %d chunks, want places 1–9 of the long and the open answer (18)", got)
	}
	if got := rest.Summary().Count; got != 6+3 {
		t.Errorf("rest: %d chunks, want places 10–15 of the long answer and 10–12 of the open one (9)", got)
	}
	if got := end.Summary().Count; got != 10+5 {
		t.Errorf("end: %d chunks, want the long answer's last 10 and the short one's 5 (15)", got)
	}
	// The long answer's place n took n ms: its rest are places 10–15 and
	// its end 16–25, not the first ten that arrived.
	if got := rest.Summary().Max; got < 14.9 || got > 15.1 {
		t.Errorf("rest: slowest %.2f ms, want the long answer's place 15 (15 ms)", got)
	}
	if got := end.Summary().Mean; got < 46.5 || got > 47.5 {
		t.Errorf("end: mean %.2f ms, want (16+…+25 + 5×100) ÷ 15 = 47 ms", got)
	}
	p.ended("long") // a second end, or one after the flush, files nothing
	if got := end.Summary().Count; got != 15 {
		t.Errorf("end after a repeated end: %d chunks, want 15", got)
	}
}
