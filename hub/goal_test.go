package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/protocol"
)

// goal_state facts are pushed in Seq order: a duplicate, an older state
// (a relay's late copy) or a state of another session is dropped, and the
// snapshot carries the newest.
func TestGoalStateAppliesOnlyNewerSeq(t *testing.T) {
	fr := &fakeReader{sessions: map[string]host.Session{"s1": {WorkspaceID: "w", ID: "s1", RootID: "s1"}}}
	bus := NewLocalBus()
	h := New(Config{Reader: fr, Bus: bus})
	defer h.Close()
	tp := loadedTopic(t, h, "w", "s1")
	defer h.release(tp)
	fact := func(sid string, seq int64, status host.GoalStatus) host.Fact {
		return host.Fact{WorkspaceID: "w", Kind: host.FactGoalState, SessionID: "s1", Version: seq,
			Goal: &host.GoalState{WorkspaceID: "w", SessionID: sid, Revision: 1, Seq: seq,
				Goal: &host.Goal{GoalSpec: host.GoalSpec{Objective: "o"}, Status: status, Revision: 1}}}
	}
	tp.mu.Lock()
	before := tp.seq
	tp.mu.Unlock()
	for _, f := range []host.Fact{
		fact("s1", 2, host.GoalActive),
		fact("s1", 1, host.GoalActive), // older: dropped
		fact("s1", 2, host.GoalActive), // duplicate: dropped
		fact("other", 9, host.GoalPaused),
		fact("s1", 3, host.GoalAchieved),
	} {
		_ = bus.Publish(context.Background(), []host.Fact{f})
	}
	tp.mu.Lock()
	defer tp.mu.Unlock()
	var seqs []int64
	for _, ev := range tp.ring.evs[tp.ring.head:] {
		if ev.seq <= before {
			continue
		}
		var f struct {
			Kind    string
			Payload host.GoalState
		}
		_ = json.Unmarshal(ev.data, &f)
		if f.Kind == protocol.KindGoalState {
			seqs = append(seqs, f.Payload.Seq)
		}
	}
	if len(seqs) != 2 || seqs[0] != 2 || seqs[1] != 3 {
		t.Fatalf("goal_state events with seq %v, want [2 3]", seqs)
	}
	snap, err := tp.sessionSnapshotLocked()
	if err != nil || snap.Goal == nil || snap.Goal.Seq != 3 || snap.Goal.Goal.Status != host.GoalAchieved {
		t.Fatalf("snapshot goal = %+v, %v", snap.Goal, err)
	}
}

// corruptGoalReader answers goal reads as the Host does for a quarantined,
// undecodable goal record.
type corruptGoalReader struct{ *fakeReader }

func (corruptGoalReader) GetGoal(context.Context, string, string) (host.GoalState, error) {
	return host.GoalState{}, &host.Error{Code: host.CodeInternal, Reason: host.ReasonGoalRecordCorrupt,
		Message: "goal of session s1 cannot be read"}
}

// A corrupt goal record must not make the session unwatchable: the view
// loads without a goal (goal.get reports the typed error).
func TestCorruptGoalRecordKeepsSessionWatchable(t *testing.T) {
	fr := &fakeReader{sessions: map[string]host.Session{"s1": {WorkspaceID: "w", ID: "s1", RootID: "s1"}}}
	h := New(Config{Reader: fr, Goals: corruptGoalReader{fr}, Bus: NewLocalBus()})
	defer h.Close()
	tp, err := h.acquire(kindSession, "w", "s1")
	if err != nil {
		t.Fatal(err)
	}
	defer h.release(tp)
	tp.readMu.Lock()
	err = tp.loadLocked(context.Background())
	tp.readMu.Unlock()
	if err != nil {
		t.Fatalf("load with a corrupt goal record: %v", err)
	}
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if snap, err := tp.sessionSnapshotLocked(); err != nil || snap.Goal != nil {
		t.Fatalf("snapshot = %+v, %v", snap.Goal, err)
	}
}

// A delete or an import holds a goal without changing its record, so its
// goal_state fact has the same Seq with held set: watchers get it, and an
// unheld copy of that Seq (a late relay copy) never takes it back.
func TestGoalStateHeldAtSameSeq(t *testing.T) {
	fr := &fakeReader{sessions: map[string]host.Session{"s1": {WorkspaceID: "w", ID: "s1", RootID: "s1"}}}
	bus := NewLocalBus()
	h := New(Config{Reader: fr, Bus: bus})
	defer h.Close()
	tp := loadedTopic(t, h, "w", "s1")
	defer h.release(tp)
	fact := func(seq int64, held bool) host.Fact {
		return host.Fact{WorkspaceID: "w", Kind: host.FactGoalState, SessionID: "s1", Version: seq,
			Goal: &host.GoalState{WorkspaceID: "w", SessionID: "s1", Revision: seq, Seq: seq, Held: held,
				Goal: &host.Goal{GoalSpec: host.GoalSpec{Objective: "o"}, Status: host.GoalActive, Revision: seq}}}
	}
	tp.mu.Lock()
	before := tp.seq
	tp.mu.Unlock()
	for _, f := range []host.Fact{
		fact(2, false),
		fact(2, true),  // held by a delete: pushed
		fact(2, false), // late unheld copy: dropped
		fact(2, true),  // duplicate: dropped
		fact(3, false), // resumed: a new revision, not held
	} {
		_ = bus.Publish(context.Background(), []host.Fact{f})
	}
	tp.mu.Lock()
	defer tp.mu.Unlock()
	var got []string
	for _, ev := range tp.ring.evs[tp.ring.head:] {
		if ev.seq <= before {
			continue
		}
		var f struct {
			Kind    string
			Payload host.GoalState
		}
		_ = json.Unmarshal(ev.data, &f)
		if f.Kind == protocol.KindGoalState {
			got = append(got, fmt.Sprintf("%d/%v", f.Payload.Seq, f.Payload.Held))
		}
	}
	if want := []string{"2/false", "2/true", "3/false"}; !slices.Equal(got, want) {
		t.Fatalf("goal_state events %v, want %v", got, want)
	}
}

// loadedTopic acquires ws/sid's session topic and loads it as a first
// subscribe would. The caller releases it (before closing the hub).
func loadedTopic(tb testing.TB, h *Hub, ws, sid string) *topic {
	tb.Helper()
	tp, err := h.acquire(kindSession, ws, sid)
	if err != nil {
		tb.Fatal(err)
	}
	tp.readMu.Lock()
	err = tp.loadLocked(context.Background())
	tp.readMu.Unlock()
	if err != nil {
		h.release(tp)
		tb.Fatal(err)
	}
	return tp
}
