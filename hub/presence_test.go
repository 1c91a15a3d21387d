package hub

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/protocol"
)

func TestMergePresence(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	es := []PresenceEntry{
		{UserID: "bob", Name: "Bob", SessionID: "s1", Replica: "r2", Conn: "c3", Since: t0.Add(time.Minute)},
		{UserID: "alice", Name: "Alice", SessionID: "s1", Replica: "r1", Conn: "c1", Since: t0.Add(2 * time.Minute)},
		{UserID: "alice", Name: "Alice", SessionID: "s1", Replica: "r2", Conn: "c2", Since: t0, Typing: true},
		{UserID: "alice", Name: "Alice", Replica: "r1", Conn: "c1", Since: t0.Add(2 * time.Minute), Typing: true},
		{UserID: "carol", Name: "Carol", SessionID: "s2", Replica: "r1", Conn: "c4", Since: t0},
	}
	p := MergePresence(es, "s1")
	if len(p.Watchers) != 2 {
		t.Fatalf("s1 watchers %+v", p.Watchers)
	}
	a, b := p.Watchers[0], p.Watchers[1]
	// One entry per person, earliest arrival first, typing if any tab types,
	// every replica they are on.
	if a.UserID != "alice" || !a.Since.Equal(t0) || !a.Typing || !slices.Equal(a.Replicas, []string{"r1", "r2"}) {
		t.Fatalf("alice %+v", a)
	}
	if b.UserID != "bob" || b.Typing {
		t.Fatalf("bob %+v", b)
	}
	ws := MergePresence(es, "")
	if len(ws.Watchers) != 3 || !slices.Equal(ws.Watchers[0].Sessions, []string{"s1"}) {
		t.Fatalf("workspace presence %+v", ws.Watchers)
	}
	// Typing is only ever about a session: the workspace list omits it.
	if ws.Watchers[0].UserID != "alice" || ws.Watchers[0].Typing {
		t.Fatalf("workspace presence carries no typing: %+v", ws.Watchers[0])
	}
}

// flakyPresence is a replica's view of the shared store that can be cut
// off, as when the replica dies or is partitioned.
type flakyPresence struct {
	PresenceStore
	down atomic.Bool
}

func (f *flakyPresence) Put(ctx context.Context, ws, replica string, es []PresenceEntry, ttl time.Duration) error {
	if f.down.Load() {
		return errors.New("replica is gone")
	}
	return f.PresenceStore.Put(ctx, ws, replica, es, ttl)
}

// fakeConn registers a connection on a topic without a socket: enough for
// presence, which reads identity and subscriptions only.
func fakeConn(t *testing.T, h *Hub, tp *topic, id, user, name string) *Conn {
	t.Helper()
	// writing: frames stay queued, as no socket would take them.
	c := &Conn{h: h, id: id, since: time.Now(), writing: true}
	c.SetIdentity(user, name)
	tp.mu.Lock()
	c.subMu.Lock()
	tp.subs[c] = struct{}{}
	c.subs = append(c.subs, tp)
	c.subMu.Unlock()
	tp.mu.Unlock()
	return c
}

func topicPresence(tp *topic) protocol.Presence {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return tp.presenceLocked()
}

func names(p protocol.Presence) []string {
	var out []string
	for _, w := range p.Watchers {
		n := w.Name
		if w.Typing {
			n += "…"
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Two replicas share presence; typing shows and lapses; a replica that
// stops publishing loses its watchers once its entries expire.
func TestPresenceAcrossReplicas(t *testing.T) {
	shared := NewLocalPresence()
	p2 := &flakyPresence{PresenceStore: shared}
	cfg := func(p PresenceStore, replica string) Config {
		return Config{Reader: &fakeReader{sessions: map[string]host.Session{"s": {WorkspaceID: "w", ID: "s"}}},
			Bus: NewLocalBus(), Presence: p, Replica: replica,
			PresenceInterval: 20 * time.Millisecond, PresenceTTL: 150 * time.Millisecond}
	}
	h1, h2 := New(cfg(shared, "r1")), New(cfg(p2, "r2"))
	defer h1.Close()
	defer h2.Close()
	t1, err := h1.acquire(kindSession, "w", "s")
	if err != nil {
		t.Fatal(err)
	}
	t2, err := h2.acquire(kindSession, "w", "s")
	if err != nil {
		t.Fatal(err)
	}
	alice := fakeConn(t, h1, t1, "c1", "alice", "Alice")
	fakeConn(t, h2, t2, "c2", "bob", "Bob")
	h1.presenceWake()
	waitUntil(t, func() bool { return slices.Equal(names(topicPresence(t1)), []string{"Alice", "Bob"}) })
	waitUntil(t, func() bool { return slices.Equal(names(topicPresence(t2)), []string{"Alice", "Bob"}) })

	alice.SetTyping("s", true)
	waitUntil(t, func() bool { return slices.Equal(names(topicPresence(t2)), []string{"Alice…", "Bob"}) })
	alice.SetTyping("s", false)
	waitUntil(t, func() bool { return slices.Equal(names(topicPresence(t2)), []string{"Alice", "Bob"}) })

	// The presence change reached watchers as an event, not only the view.
	t1.mu.Lock()
	var kinds []string
	for _, ev := range t1.ring.evs[t1.ring.head:] {
		if ev.key == t1.name+"\x00presence" {
			kinds = append(kinds, "presence")
		}
	}
	t1.mu.Unlock()
	if len(kinds) < 2 {
		t.Fatalf("presence events on replica 1: %d", len(kinds))
	}

	p2.down.Store(true) // replica 2 dies without a word
	start := time.Now()
	waitUntil(t, func() bool { return slices.Equal(names(topicPresence(t1)), []string{"Alice"}) })
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("a dead replica's watchers lingered %v", d)
	}
}

// BenchmarkPresenceTick is one presence round on a busy replica: 1000
// connections over 50 sessions of one workspace, nothing changed (the
// steady state: collect, compare, list, merge, compare per topic).
func BenchmarkPresenceTick(b *testing.B) {
	h := New(Config{Reader: &fakeReader{}, Bus: NewLocalBus(), PresenceInterval: time.Hour})
	defer h.Close()
	var topics []*topic
	for i := range 50 {
		tp, err := h.acquire(kindSession, "w", "s"+itoa(i))
		if err != nil {
			b.Fatal(err)
		}
		topics = append(topics, tp)
	}
	t := &testing.T{}
	for i := range 1000 {
		fakeConn(t, h, topics[i%50], "c"+itoa(i), "u"+itoa(i%300), "User "+itoa(i%300))
	}
	ps := newPresenceState()
	now := time.Now()
	h.presenceTick(ps, now)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		h.presenceTick(ps, now)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// BenchmarkPresenceEncodeReference is the reference a presence round is
// compared with: encoding and decoding the same 1000 entries once as JSON
// (what a replica's publish and a peer's read cost the Redis adapter).
func BenchmarkPresenceEncodeReference(b *testing.B) {
	es := make([]PresenceEntry, 1000)
	for i := range es {
		es[i] = PresenceEntry{UserID: "u" + itoa(i%300), Name: "User " + itoa(i%300), SessionID: "s" + itoa(i%50),
			Replica: "r1", Conn: "c" + itoa(i), Since: time.Now()}
	}
	b.ReportAllocs()
	for range b.N {
		data, err := json.Marshal(es)
		if err != nil {
			b.Fatal(err)
		}
		var back []PresenceEntry
		if err := json.Unmarshal(data, &back); err != nil {
			b.Fatal(err)
		}
	}
}
