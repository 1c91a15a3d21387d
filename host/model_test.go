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

// TestSessionSucceeds: within one millisecond of the Host's clock a
// session state whose transcript or Turn count is behind the one shown is
// older; another incarnation (another CreatedAt) is not compared so.
func TestSessionSucceeds(t *testing.T) {
	at := time.UnixMilli(1_750_000_000_000)
	state := func(ms, version, turns int64) Session {
		return Session{ID: "s", CreatedAt: at, UpdatedAt: at.Add(time.Duration(ms) * time.Millisecond), MessageVersion: version, TurnCount: turns}
	}
	other := state(0, 1, 1)
	other.CreatedAt = at.Add(-time.Hour)
	for _, c := range []struct {
		name      string
		next, old Session
		succeeds  bool
	}{
		{"later", state(1, 4, 2), state(0, 5, 2), true},
		{"older", state(0, 5, 2), state(1, 5, 2), false},
		{"same millisecond, same state", state(0, 5, 2), state(0, 5, 2), true},
		{"same millisecond, transcript ahead", state(0, 6, 2), state(0, 5, 2), true},
		{"same millisecond, transcript behind", state(0, 4, 2), state(0, 5, 2), false},
		{"same millisecond, fewer Turns", state(0, 5, 1), state(0, 5, 2), false},
		{"same millisecond, another incarnation", other, state(0, 5, 2), true},
	} {
		if got := c.next.Succeeds(c.old); got != c.succeeds {
			t.Errorf("%s: Succeeds = %v, want %v", c.name, got, c.succeeds)
		}
	}
}
