package hub

import (
	"context"
	"encoding/binary"
	"hash/maphash"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/ensemble-dev/ensemble/protocol"
)

// Presence: who is connected to each workspace and watching each session,
// shared between replicas. Each hub publishes its own people (one entry
// per person and topic, their connections folded) to a PresenceStore with an expiry and
// reads everyone's back on the same tick, so a replica that dies drops
// its people once its entries expire. A topic gets a `presence` event only
// when the merged list changed, at most once per tick (coalesced and
// rate-limited by construction).

// PresenceEntry is one person's presence on one topic from one replica
// (their connections there folded: earliest since, typing if any types).
type PresenceEntry struct {
	UserID string `json:"userId"`
	Name   string `json:"name,omitempty"`
	// SessionID is the watched session; empty for the workspace topic.
	SessionID string `json:"sessionId,omitempty"`
	Replica   string `json:"replica"`
	// Conn is unused since entries are per person; older replicas set it.
	Conn   string    `json:"conn,omitempty"`
	Since  time.Time `json:"since"`
	Typing bool      `json:"typing,omitempty"`
}

// PresenceStore shares presence entries between replicas. Put replaces
// replica's entries for ws (the hub passes its epoch: unique per process); they vanish after ttl unless Put again. List
// returns every replica's live entries for ws.
type PresenceStore interface {
	Put(ctx context.Context, ws, replica string, entries []PresenceEntry, ttl time.Duration) error
	List(ctx context.Context, ws string) ([]PresenceEntry, error)
}

// MergePresence folds entries into one Watcher per user for a topic:
// sessionID "" is the workspace (every entry counts), otherwise only that
// session's watchers count.
func MergePresence(entries []PresenceEntry, sessionID string) protocol.Presence {
	by := map[string]*protocol.Watcher{}
	for _, e := range entries {
		if sessionID != "" && e.SessionID != sessionID {
			continue
		}
		w := by[e.UserID]
		if w == nil {
			w = &protocol.Watcher{UserID: e.UserID, Name: e.Name, Since: e.Since}
			by[e.UserID] = w
		}
		if e.Since.Before(w.Since) {
			w.Since = e.Since
		}
		if w.Name == "" {
			w.Name = e.Name
		}
		// Typing is about a session; the workspace list leaves it out so
		// keystrokes do not churn every workspace watcher.
		w.Typing = w.Typing || (e.Typing && sessionID != "")
		if !slices.Contains(w.Replicas, e.Replica) {
			w.Replicas = append(w.Replicas, e.Replica)
		}
		if sessionID == "" && e.SessionID != "" && !slices.Contains(w.Sessions, e.SessionID) {
			w.Sessions = append(w.Sessions, e.SessionID)
		}
	}
	out := protocol.Presence{SessionID: sessionID, Watchers: make([]protocol.Watcher, 0, len(by))}
	for _, w := range by {
		sort.Strings(w.Replicas)
		sort.Strings(w.Sessions)
		out.Watchers = append(out.Watchers, *w)
	}
	sort.Slice(out.Watchers, func(i, j int) bool {
		a, b := out.Watchers[i], out.Watchers[j]
		if !a.Since.Equal(b.Since) {
			return a.Since.Before(b.Since)
		}
		return a.UserID < b.UserID
	})
	return out
}

// LocalPresence is the in-process PresenceStore (one replica, or tests).
type LocalPresence struct {
	mu  sync.Mutex
	now func() time.Time
	m   map[string]map[string]localEntries // ws → replica → entries
}

type localEntries struct {
	until   time.Time
	entries []PresenceEntry
}

// NewLocalPresence returns an empty in-process presence store.
func NewLocalPresence() *LocalPresence {
	return &LocalPresence{now: time.Now, m: map[string]map[string]localEntries{}}
}

// Put implements PresenceStore.
func (p *LocalPresence) Put(_ context.Context, ws, replica string, entries []PresenceEntry, ttl time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.m[ws]
	if len(entries) == 0 {
		delete(r, replica)
		if len(r) == 0 {
			delete(p.m, ws)
		}
		return nil
	}
	if r == nil {
		r = map[string]localEntries{}
		p.m[ws] = r
	}
	r[replica] = localEntries{until: p.now().Add(ttl), entries: slices.Clone(entries)}
	return nil
}

// List implements PresenceStore.
func (p *LocalPresence) List(_ context.Context, ws string) ([]PresenceEntry, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	var out []PresenceEntry
	for replica, e := range p.m[ws] {
		if now.After(e.until) {
			delete(p.m[ws], replica)
			continue
		}
		out = append(out, e.entries...)
	}
	return out, nil
}

// typingFor is how long one typing signal counts: a client repeats it
// while the person keeps typing.
const typingFor = 5 * time.Second

// SetIdentity records who is on c (after hello, or a token refresh).
func (c *Conn) SetIdentity(userID, name string) {
	c.pmu.Lock()
	c.userID, c.userName = userID, name
	c.pmu.Unlock()
	c.h.presenceWake()
}

// SetTyping marks c as typing in sessionID (or stops it); the signal
// lapses on its own after a few seconds.
func (c *Conn) SetTyping(sessionID string, typing bool) {
	c.pmu.Lock()
	if typing {
		c.typingIn, c.typingUntil = sessionID, time.Now().Add(typingFor)
	} else {
		c.typingIn, c.typingUntil = "", time.Time{}
	}
	c.pmu.Unlock()
	c.h.presenceWake()
}

// Watches reports whether c subscribes to the session topic of ws/sid.
func (c *Conn) Watches(ws, sid string) bool {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	return c.sub(topicName(kindSession, ws, sid)) != nil
}

func (h *Hub) presenceWake() {
	h.presenceGen.Add(1)
	select {
	case h.pwake <- struct{}{}:
	default:
	}
}

// presenceLoop publishes this replica's presence and emits merged presence
// to local topics, once per PresenceInterval (sooner after a join, leave
// or typing change, but never more often than a quarter interval).
func (h *Hub) presenceLoop() {
	defer h.wg.Done()
	tick := time.NewTicker(h.cfg.PresenceInterval)
	defer tick.Stop()
	ps := newPresenceState()
	for {
		select {
		case <-h.ctx.Done():
			h.withdrawPresence(ps)
			return
		case <-tick.C:
		case <-h.pwake:
			select {
			case <-h.ctx.Done():
				h.withdrawPresence(ps)
				return
			case <-time.After(h.cfg.PresenceInterval / 4):
			}
		}
		h.presenceTick(ps, time.Now())
	}
}

// presenceState is what the loop remembers between rounds, per workspace:
// what it last published (and when), and what it last merged, both as
// hashes, so a round in which nothing changed allocates almost nothing.
type presenceState struct {
	published map[string]presencePut
	merged    map[string]uint64

	// This replica's entries as last collected: collected again only after
	// a join, leave, identity or typing change (gen) or a typing lapse, so
	// an idle round costs nothing per connection.
	local       map[string][]PresenceEntry
	localGen    uint64
	typingLapse time.Time // the earliest typing signal that lapses; zero: none
}

type presencePut struct {
	hash uint64
	at   time.Time
}

func newPresenceState() *presenceState {
	return &presenceState{published: map[string]presencePut{}, merged: map[string]uint64{}}
}

// presenceTick is one round: collect, publish changes (and refresh before
// expiry), read everyone's, emit what changed.
func (h *Hub) presenceTick(ps *presenceState, now time.Time) {
	if gen := h.presenceGen.Load(); ps.local == nil || gen != ps.localGen ||
		(!ps.typingLapse.IsZero() && !now.Before(ps.typingLapse)) {
		ps.local, ps.typingLapse = h.localPresence(now)
		ps.localGen = gen
	}
	local := make(map[string][]PresenceEntry, len(ps.local)+len(ps.published))
	for ws, es := range ps.local {
		local[ws] = es
	}
	for ws := range ps.published {
		if _, ok := local[ws]; !ok {
			local[ws] = nil // withdraw
		}
	}
	ctx, cancel := context.WithTimeout(h.ctx, h.cfg.PresenceInterval*2)
	defer cancel()
	for ws, entries := range local {
		sum := entriesHash(entries, 0)
		last, had := ps.published[ws]
		if had && last.hash == sum && now.Sub(last.at) < h.cfg.PresenceTTL/3 {
			continue
		}
		if !had && len(entries) == 0 {
			continue
		}
		if err := h.cfg.Presence.Put(ctx, ws, h.cfg.Epoch, entries, h.cfg.PresenceTTL); err != nil {
			h.log.Warn("hub: publish presence", "workspace", ws, "err", err)
			continue
		}
		if len(entries) == 0 {
			delete(ps.published, ws)
		} else {
			ps.published[ws] = presencePut{hash: sum, at: now}
		}
	}
	topicsByWS := h.presenceTopics()
	for ws := range ps.merged {
		if _, ok := topicsByWS[ws]; !ok {
			delete(ps.merged, ws)
		}
	}
	for ws, topics := range topicsByWS {
		all, err := h.cfg.Presence.List(ctx, ws)
		if err != nil {
			h.log.Warn("hub: read presence", "workspace", ws, "err", err)
			continue
		}
		// Nothing changed anywhere (same entries, same topics): skip the merge.
		sum := entriesHash(all, uint64(len(topics)))
		if last, ok := ps.merged[ws]; ok && last == sum {
			continue
		}
		ps.merged[ws] = sum
		// One pass to bucket by session, so each topic merges only its own.
		bySession := map[string][]PresenceEntry{}
		for _, e := range all {
			if e.SessionID != "" {
				bySession[e.SessionID] = append(bySession[e.SessionID], e)
			}
		}
		for _, t := range topics {
			if t.sid == "" {
				t.setPresence(MergePresence(all, ""))
			} else {
				t.setPresence(MergePresence(bySession[t.sid], t.sid))
			}
		}
	}
}

func (h *Hub) withdrawPresence(ps *presenceState) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for ws := range ps.published {
		_ = h.cfg.Presence.Put(ctx, ws, h.cfg.Epoch, nil, h.cfg.PresenceTTL)
	}
}

var presenceSeed = maphash.MakeSeed()

// entriesHash fingerprints an entry list (order-independent, no
// allocation) for change detection; extra mixes in other state.
func entriesHash(es []PresenceEntry, extra uint64) uint64 {
	sum := extra*0x9e3779b97f4a7c15 + uint64(len(es))
	var h maphash.Hash
	h.SetSeed(presenceSeed)
	for _, e := range es {
		h.Reset()
		for _, s := range [...]string{e.UserID, e.Name, e.SessionID, e.Replica, e.Conn} {
			h.WriteString(s)
			h.WriteByte(0)
		}
		var b [9]byte
		binary.LittleEndian.PutUint64(b[:8], uint64(e.Since.UnixNano()))
		if e.Typing {
			b[8] = 1
		}
		h.Write(b[:])
		sum += h.Sum64() // a sum: the order of entries does not matter
	}
	return sum
}

// presenceTopics lists the live topics per workspace.
func (h *Hub) presenceTopics() map[string][]*topic {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string][]*topic, len(h.workspaces))
	for ws, e := range h.workspaces {
		if e.ws != nil {
			out[ws] = append(out[ws], e.ws)
		}
		for _, t := range e.sessions {
			out[ws] = append(out[ws], t)
		}
	}
	return out
}

// localPresence collects this replica's entries per workspace, one per
// person and topic (in no particular order: change detection hashes them
// order-independently), and when the first typing signal lapses.
func (h *Hub) localPresence(now time.Time) (map[string][]PresenceEntry, time.Time) {
	out := map[string][]PresenceEntry{}
	var lapse time.Time
	var conns []*Conn
	idx := map[string]int{} // person → entry, per topic
	for ws, topics := range h.presenceTopics() {
		var es []PresenceEntry
		for _, t := range topics {
			t.mu.Lock()
			conns = conns[:0]
			for c := range t.subs {
				conns = append(conns, c)
			}
			t.mu.Unlock()
			clear(idx)
			for _, c := range conns {
				c.pmu.Lock()
				e := PresenceEntry{UserID: c.userID, Name: c.userName, SessionID: t.sid,
					Replica: h.cfg.Replica, Since: c.since,
					Typing: t.sid != "" && c.typingIn == t.sid && now.Before(c.typingUntil)}
				if e.Typing && (lapse.IsZero() || c.typingUntil.Before(lapse)) {
					lapse = c.typingUntil
				}
				c.pmu.Unlock()
				if e.UserID == "" {
					continue
				}
				i, ok := idx[e.UserID]
				if !ok {
					idx[e.UserID] = len(es)
					es = append(es, e)
					continue
				}
				p := &es[i]
				if e.Since.Before(p.Since) {
					p.Since = e.Since
				}
				if p.Name == "" {
					p.Name = e.Name
				}
				p.Typing = p.Typing || e.Typing
			}
		}
		if len(es) > 0 {
			out[ws] = es
		}
	}
	clear(conns)
	return out, lapse
}

// setPresence emits a presence event when the merged list changed.
func (t *topic) setPresence(p protocol.Presence) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.presenceSent && same(t.presence, p) {
		return
	}
	first := !t.presenceSent
	t.presence, t.presenceSent = p, true
	if first && len(p.Watchers) == 0 {
		return // nobody was here and nobody is: nothing to say
	}
	t.emit(protocol.KindPresence, "presence", p)
}

// presenceLocked is the topic's current presence for a snapshot. Caller
// holds t.mu.
func (t *topic) presenceLocked() protocol.Presence {
	p := t.presence
	p.SessionID = t.sid
	if p.Watchers == nil {
		p.Watchers = []protocol.Watcher{}
	}
	return p
}
