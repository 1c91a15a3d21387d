package hub

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Presence: who is connected to each workspace and watching each session,
// shared between replicas. Each hub publishes its own connections (one
// entry per connection and topic) to a PresenceStore with an expiry and
// reads everyone's back on the same tick, so a replica that dies drops
// its people once its entries expire. A topic gets a `presence` event only
// when the merged list changed, at most once per tick (coalesced and
// rate-limited by construction).

// KindPresence is the event kind carrying a topic's merged presence.
const KindPresence = "presence"

// PresenceEntry is one connection's presence on one topic.
type PresenceEntry struct {
	UserID string `json:"userId"`
	Name   string `json:"name,omitempty"`
	// SessionID is the watched session; empty for the workspace topic.
	SessionID string    `json:"sessionId,omitempty"`
	Replica   string    `json:"replica"`
	Conn      string    `json:"conn"`
	Since     time.Time `json:"since"`
	Typing    bool      `json:"typing,omitempty"`
}

// PresenceStore shares presence entries between replicas. Put replaces
// replica's entries for ws (the hub passes its epoch: unique per process); they vanish after ttl unless Put again. List
// returns every replica's live entries for ws.
type PresenceStore interface {
	Put(ctx context.Context, ws, replica string, entries []PresenceEntry, ttl time.Duration) error
	List(ctx context.Context, ws string) ([]PresenceEntry, error)
}

// Watcher is one person in a presence list: their connections merged
// (earliest since; typing if any connection types; every replica).
type Watcher struct {
	UserID   string    `json:"userId"`
	Name     string    `json:"name,omitempty"`
	Since    time.Time `json:"since"`
	Typing   bool      `json:"typing"` // session topics only
	Replicas []string  `json:"replicas"`
	// Sessions lists the sessions this person watches (workspace topic only).
	Sessions []string `json:"sessions,omitempty"`
}

// Presence is the payload of a presence event and the presence field of a
// snapshot: everyone on the topic, ordered by arrival.
type Presence struct {
	SessionID string    `json:"sessionId,omitempty"`
	Watchers  []Watcher `json:"watchers"`
}

// MergePresence folds entries into one Watcher per user for a topic:
// sessionID "" is the workspace (every entry counts), otherwise only that
// session's watchers count.
func MergePresence(entries []PresenceEntry, sessionID string) Presence {
	by := map[string]*Watcher{}
	for _, e := range entries {
		if sessionID != "" && e.SessionID != sessionID {
			continue
		}
		w := by[e.UserID]
		if w == nil {
			w = &Watcher{UserID: e.UserID, Name: e.Name, Since: e.Since}
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
	out := Presence{SessionID: sessionID, Watchers: make([]Watcher, 0, len(by))}
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
	_, ok := c.subs[topicName(kindSession, ws, sid)]
	return ok
}

func (h *Hub) presenceWake() {
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
	published := map[string]presencePut{} // ws → what we last put
	for {
		select {
		case <-h.ctx.Done():
			h.withdrawPresence(published)
			return
		case <-tick.C:
		case <-h.pwake:
			select {
			case <-h.ctx.Done():
				h.withdrawPresence(published)
				return
			case <-time.After(h.cfg.PresenceInterval / 4):
			}
		}
		h.presenceTick(published, time.Now())
	}
}

type presencePut struct {
	key string
	at  time.Time
}

// presenceTick is one round: collect, publish changes (and refresh before
// expiry), read everyone's, emit what changed.
func (h *Hub) presenceTick(published map[string]presencePut, now time.Time) {
	local := h.localPresence(now)
	for ws := range published {
		if _, ok := local[ws]; !ok {
			local[ws] = nil // withdraw
		}
	}
	ctx, cancel := context.WithTimeout(h.ctx, h.cfg.PresenceInterval*2)
	defer cancel()
	for ws, entries := range local {
		key := presenceKey(entries)
		last, had := published[ws]
		if had && last.key == key && now.Sub(last.at) < h.cfg.PresenceTTL/3 {
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
			delete(published, ws)
		} else {
			published[ws] = presencePut{key: key, at: now}
		}
	}
	for ws, topics := range h.presenceTopics() {
		all, err := h.cfg.Presence.List(ctx, ws)
		if err != nil {
			h.log.Warn("hub: read presence", "workspace", ws, "err", err)
			continue
		}
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

func (h *Hub) withdrawPresence(published map[string]presencePut) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for ws := range published {
		_ = h.cfg.Presence.Put(ctx, ws, h.cfg.Epoch, nil, h.cfg.PresenceTTL)
	}
}

// presenceKey identifies an entry list for change detection.
func presenceKey(es []PresenceEntry) string {
	var b strings.Builder
	for _, e := range es {
		b.WriteString(e.Conn + "\x00" + e.SessionID + "\x00" + e.UserID + "\x00" + e.Name)
		if e.Typing {
			b.WriteString("\x00t")
		}
		b.WriteByte('\n')
	}
	return b.String()
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

// localPresence collects this replica's entries per workspace, in a
// stable order.
func (h *Hub) localPresence(now time.Time) map[string][]PresenceEntry {
	out := map[string][]PresenceEntry{}
	for ws, topics := range h.presenceTopics() {
		var es []PresenceEntry
		for _, t := range topics {
			t.mu.Lock()
			conns := make([]*Conn, 0, len(t.subs))
			for c := range t.subs {
				conns = append(conns, c)
			}
			t.mu.Unlock()
			for _, c := range conns {
				c.pmu.Lock()
				e := PresenceEntry{UserID: c.userID, Name: c.userName, SessionID: t.sid,
					Replica: h.cfg.Replica, Conn: c.id, Since: c.since,
					Typing: t.sid != "" && c.typingIn == t.sid && now.Before(c.typingUntil)}
				c.pmu.Unlock()
				if e.UserID != "" {
					es = append(es, e)
				}
			}
		}
		sort.Slice(es, func(i, j int) bool {
			if es[i].Conn != es[j].Conn {
				return es[i].Conn < es[j].Conn
			}
			return es[i].SessionID < es[j].SessionID
		})
		if len(es) > 0 {
			out[ws] = es
		}
	}
	return out
}

// setPresence emits a presence event when the merged list changed.
func (t *topic) setPresence(p Presence) {
	key := jsonKey(p)
	t.mu.Lock()
	defer t.mu.Unlock()
	if key == t.presenceKey {
		return
	}
	first := t.presenceKey == ""
	t.presence, t.presenceKey = p, key
	if first && len(p.Watchers) == 0 {
		return // nobody was here and nobody is: nothing to say
	}
	t.emit(KindPresence, "presence", p)
}

// presenceLocked is the topic's current presence for a snapshot. Caller
// holds t.mu.
func (t *topic) presenceLocked() Presence {
	p := t.presence
	p.SessionID = t.sid
	if p.Watchers == nil {
		p.Watchers = []Watcher{}
	}
	return p
}
