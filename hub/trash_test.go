package hub

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/protocol"
)

// A trash fact is pushed to the workspace topic as trash_changed at once,
// with its ids, and causes no reread: it is workspace-level (no session),
// which must not take the everything-dirty path.
func TestTrashFactPushesWithoutReread(t *testing.T) {
	fr := &fakeReader{sessions: map[string]host.Session{}}
	bus := NewLocalBus()
	h := New(Config{Reader: fr, Bus: bus, Workers: 2})
	defer h.Close()
	wt, err := h.acquire(kindWorkspace, "w", "")
	if err != nil {
		t.Fatal(err)
	}
	defer h.release(wt)
	_ = bus.Publish(context.Background(), []host.Fact{
		{WorkspaceID: "w", Kind: host.FactTrashChanged, Trash: &host.TrashChange{Purged: []string{"a", "b"}}},
		{WorkspaceID: "other", Kind: host.FactTrashChanged, Trash: &host.TrashChange{Purged: []string{"c"}}},
	})
	wt.mu.Lock()
	evs := slices.Clone(wt.ring.evs[wt.ring.head:])
	wt.mu.Unlock()
	if len(evs) != 1 {
		t.Fatalf("%d events, want 1", len(evs))
	}
	var fr0 struct {
		Kind    string                `json:"kind"`
		Payload protocol.TrashChanged `json:"payload"`
	}
	if err := json.Unmarshal(evs[0].data, &fr0); err != nil {
		t.Fatal(err)
	}
	if fr0.Kind != protocol.KindTrashChanged || fr0.Payload.Workspace != "w" || !slices.Equal(fr0.Payload.Purged, []string{"a", "b"}) ||
		fr0.Payload.Deleted == nil || fr0.Payload.Restored == nil {
		t.Fatalf("event %s", evs[0].data)
	}
	time.Sleep(50 * time.Millisecond)
	if n := h.Stats().Rereads; n != 0 {
		t.Fatalf("a trash fact caused %d rereads", n)
	}
}
