package host

import (
	"testing"
	"time"
)

// TestTurnSucceeds: a published Turn state replaces the one shown unless
// it is older, and an unsettled state never replaces a settled one, even
// within the same millisecond.
func TestTurnSucceeds(t *testing.T) {
	at := time.UnixMilli(1_750_000_000_000)
	state := func(p TurnPhase, ms int64) Turn {
		return Turn{ID: "t", Phase: p, UpdatedAt: at.Add(time.Duration(ms) * time.Millisecond)}
	}
	for _, c := range []struct {
		name     string
		next     Turn
		old      Turn
		succeeds bool
	}{
		{"later", state(PhaseDurablyAccepted, 1), state(PhaseDispatched, 0), true},
		{"older", state(PhaseDispatched, 0), state(PhaseDurablyAccepted, 1), false},
		{"same millisecond", state(PhaseDurablyAccepted, 0), state(PhaseDispatched, 0), true},
		{"settled, same millisecond", state(PhaseSettled, 0), state(PhaseDurablyAccepted, 0), true},
		{"unsettled over settled, same millisecond", state(PhaseDurablyAccepted, 0), state(PhaseSettled, 0), false},
		{"unsettled over settled, later", state(PhaseDispatched, 5), state(PhaseSettled, 0), false},
		{"settled again, later (a label, a stop reason)", state(PhaseSettled, 1), state(PhaseSettled, 0), true},
	} {
		if got := c.next.Succeeds(c.old); got != c.succeeds {
			t.Errorf("%s: Succeeds = %v, want %v", c.name, got, c.succeeds)
		}
	}
}
