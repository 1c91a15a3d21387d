package loadtest

import (
	"testing"
	"time"
)

func TestStaggerOffset(t *testing.T) {
	answer := 100 * 15 * time.Millisecond
	const n = 8
	step := answer / n
	for i := range n {
		if got, want := staggerOffset(i, n, answer), time.Duration(i)*step; got != want {
			t.Errorf("session %d of %d starts at %v, want %v", i, n, got, want)
		}
	}
	if last := staggerOffset(n-1, n, answer); last >= answer {
		t.Errorf("the last session starts at %v, not within one answer (%v)", last, answer)
	}
	if got := staggerOffset(0, 0, answer); got != 0 {
		t.Errorf("no sessions: offset %v", got)
	}
}
