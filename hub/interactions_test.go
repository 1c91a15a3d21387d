package hub

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/protocol"
)

// treeReader serves one interaction tree for root "r".
type treeReader struct {
	*fakeReader
	mu    sync.Mutex
	tree  host.InteractionTree
	reads atomic.Int64
}

func (f *treeReader) GetSessionInteractionTreeSnapshot(_ context.Context, ws, root string) (host.InteractionTree, error) {
	f.reads.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if root != "r" {
		return host.InteractionTree{WorkspaceID: ws, RootSessionID: root}, nil
	}
	return f.tree, nil
}

func (f *treeReader) set(tree host.InteractionTree) {
	f.mu.Lock()
	f.tree = tree
	f.mu.Unlock()
}

// treeEvents decodes a topic's interaction_snapshot events.
func treeEvents(t *testing.T, tp *topic) []protocol.InteractionSnapshot {
	t.Helper()
	tp.mu.Lock()
	defer tp.mu.Unlock()
	var out []protocol.InteractionSnapshot
	for _, ev := range tp.ring.evs[tp.ring.head:] {
		var f struct {
			Kind    string                       `json:"kind"`
			Payload protocol.InteractionSnapshot `json:"payload"`
		}
		if err := json.Unmarshal(ev.data, &f); err != nil {
			t.Fatal(err)
		}
		if f.Kind == protocol.KindInteractionSnapshot {
			out = append(out, f.Payload)
		}
	}
	return out
}

// A tree fact makes every watched session of that tree (root and
// sub-agent) reread the tree once and push one complete snapshot for the
// exact root turn; an unchanged tree pushes nothing; an empty list clears.
func TestInteractionTreeFact(t *testing.T) {
	fr := &treeReader{fakeReader: &fakeReader{sessions: map[string]host.Session{
		"r": {WorkspaceID: "w", ID: "r", RootID: "r"},
		"c": {WorkspaceID: "w", ID: "c", ParentID: "r", RootID: "r"},
		"x": {WorkspaceID: "w", ID: "x", RootID: "x"},
	}}}
	bus := NewLocalBus()
	h := New(Config{Reader: fr, Bus: bus, Workers: 2})
	defer h.Close()
	topics := map[string]*topic{}
	for _, id := range []string{"r", "c", "x"} {
		tp := loadedTopic(t, h, "w", id)
		defer h.release(tp)
		topics[id] = tp
	}
	waitQuiet(t, h)
	for id, tp := range topics {
		if evs := treeEvents(t, tp); len(evs) != 0 {
			t.Fatalf("%s: events before any change: %+v", id, evs)
		}
	}

	it := host.Interaction{WorkspaceID: "w", SessionID: "c", TurnID: "ct1", RequestID: "q1", RootSessionID: "r",
		Kind: host.InteractionApproval, State: host.InteractionPending}
	fr.set(host.InteractionTree{WorkspaceID: "w", RootSessionID: "r", RootTurnID: "t1", Interactions: []host.Interaction{it}})
	reads := fr.reads.Load()
	fact := []host.Fact{{WorkspaceID: "w", Kind: host.FactInteractionTreeDirty, SessionID: "r", TurnID: "t1"}}
	_ = bus.Publish(context.Background(), fact)
	waitUntil(t, func() bool { return len(treeEvents(t, topics["r"])) == 1 && len(treeEvents(t, topics["c"])) == 1 })
	waitQuiet(t, h)
	if n := fr.reads.Load() - reads; n != 2 {
		t.Fatalf("tree reads for one fact: %d, want one per watched session of the tree (2)", n)
	}
	for _, id := range []string{"r", "c"} {
		ev := treeEvents(t, topics[id])[0]
		if ev.RootSessionID != "r" || ev.TurnID != "t1" || len(ev.Interactions) != 1 || ev.Interactions[0].RequestID != "q1" {
			t.Fatalf("%s: snapshot %+v", id, ev)
		}
	}
	if evs := treeEvents(t, topics["x"]); len(evs) != 0 {
		t.Fatalf("another tree's topic got %+v", evs)
	}
	snap, err := topics["c"].sessionSnapshotLocked()
	if err != nil || snap.InteractionTree == nil || snap.InteractionTree.TurnID != "t1" {
		t.Fatalf("session snapshot carries the tree: %+v %v", snap.InteractionTree, err)
	}

	// The same state again: nothing new is pushed.
	_ = bus.Publish(context.Background(), fact)
	waitUntil(t, func() bool { return fr.reads.Load()-reads >= 4 })
	waitQuiet(t, h)
	if evs := treeEvents(t, topics["r"]); len(evs) != 1 {
		t.Fatalf("an unchanged tree was pushed again: %+v", evs)
	}

	// A new root turn without interactions clears exactly that root turn.
	fr.set(host.InteractionTree{WorkspaceID: "w", RootSessionID: "r", RootTurnID: "t2"})
	_ = bus.Publish(context.Background(), []host.Fact{{WorkspaceID: "w", Kind: host.FactInteractionTreeDirty, SessionID: "r", TurnID: "t2"}})
	waitUntil(t, func() bool { return len(treeEvents(t, topics["r"])) == 2 })
	if ev := treeEvents(t, topics["r"])[1]; ev.TurnID != "t2" || ev.Interactions == nil || len(ev.Interactions) != 0 {
		t.Fatalf("clear: %+v", ev)
	}
}

// waitQuiet waits until no topic is queued, owed or being reread.
func waitQuiet(t *testing.T, h *Hub) {
	t.Helper()
	waitUntil(t, func() bool {
		h.mu.Lock()
		var ts []*topic
		for _, e := range h.workspaces {
			if e.ws != nil {
				ts = append(ts, e.ws)
			}
			for _, tp := range e.sessions {
				ts = append(ts, tp)
			}
		}
		h.mu.Unlock()
		h.dmu.Lock()
		defer h.dmu.Unlock()
		for _, tp := range ts {
			if tp.queued || tp.running || tp.pending {
				return false
			}
		}
		return true
	})
}
