package storetest

import (
	"slices"
	"testing"

	"github.com/ensemble-dev/ensemble/host"
)

// testChanges: one read returns the session, its newest turns (plus named
// older ones) and the messages after a version, oldest or newest first,
// and never another workspace's rows.
func testChanges(t *testing.T, st host.Store) {
	ws := uid("ws")
	s := session(ws, uid("s"), at(0))
	s.MessageVersion = 6
	var turns []host.Turn
	for i := int64(1); i <= 4; i++ {
		turns = append(turns, turn(ws, s.ID, uid("t"), i, host.PhaseSettled))
	}
	var msgs []host.Message
	for v := int64(1); v <= 6; v++ {
		msgs = append(msgs, message(ws, s.ID, uid("m"), turns[3].ID, v))
	}
	seed(t, st, []host.Session{s}, turns, msgs, nil)

	c, err := st.Changes(ctx(t), ws, s.ID, host.ChangesQuery{AfterVersion: 2, Messages: 3, Turns: 2, TurnIDs: []string{turns[0].ID, turns[3].ID, "absent"}})
	noErr(t, "Changes", err)
	same(t, "session", c.Session, s, normSession)
	if got := turnSeqs(c.Turns); !slices.Equal(got, []int64{4, 3}) || !c.TurnsHasMore {
		t.Fatalf("turns = %v hasMore=%v, want [4 3] true", got, c.TurnsHasMore)
	}
	if got := turnSeqs(c.Extra); !slices.Equal(got, []int64{1}) {
		t.Fatalf("extra turns = %v, want [1] (a named turn already in the window or absent is skipped)", got)
	}
	if got := messageVersions(c.Messages); !slices.Equal(got, []int64{3, 4, 5}) || !c.MessagesHasMore {
		t.Fatalf("oldest after 2 = %v hasMore=%v, want [3 4 5] true", got, c.MessagesHasMore)
	}
	same(t, "message", c.Messages[0], msgs[2], normMessage)

	c, err = st.Changes(ctx(t), ws, s.ID, host.ChangesQuery{AfterVersion: 1, Messages: 2, Newest: true})
	noErr(t, "Changes newest", err)
	if got := messageVersions(c.Messages); !slices.Equal(got, []int64{5, 6}) || !c.MessagesHasMore {
		t.Fatalf("newest after 1 = %v hasMore=%v, want [5 6] true", got, c.MessagesHasMore)
	}
	c, err = st.Changes(ctx(t), ws, s.ID, host.ChangesQuery{AfterVersion: 4, NoTurns: true})
	noErr(t, "Changes without turns", err)
	if len(c.Turns) != 0 || c.TurnsHasMore || !slices.Equal(messageVersions(c.Messages), []int64{5, 6}) {
		t.Fatalf("NoTurns: turns %v, messages %v", turnSeqs(c.Turns), messageVersions(c.Messages))
	}
	c, err = st.Changes(ctx(t), ws, s.ID, host.ChangesQuery{AfterVersion: 6})
	noErr(t, "Changes at head", err)
	if len(c.Messages) != 0 || c.MessagesHasMore {
		t.Fatalf("after the head: %d messages, hasMore=%v", len(c.Messages), c.MessagesHasMore)
	}

	_, err = st.Changes(ctx(t), uid("ws"), s.ID, host.ChangesQuery{})
	wantIs(t, "Changes from another workspace", err, host.ErrNotFound)
	_, err = st.Changes(ctx(t), ws, uid("s"), host.ChangesQuery{})
	wantIs(t, "Changes of a missing session", err, host.ErrNotFound)
}
