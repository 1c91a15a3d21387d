package hub

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"time"
	"unicode/utf16"

	"github.com/ensemble-dev/ensemble/host"
)

// sessionView is what a session topic last emitted: enough to diff the next
// reread and to answer a snapshot without touching the store.
type sessionView struct {
	session    *host.Session // nil: not visible (deleted)
	sessionKey string
	turns      []host.Turn // newest first
	turnsMore  bool
	turnKeys   map[string]string
	// msgs is a window of the newest changes: every message whose version
	// is above the window floor. Older ones are paged with message.list.
	msgs     map[string]host.Message
	msgBytes int
	msgsMore bool
	lastVer  int64
	// tree is the interaction tree last emitted (nil: none read, or the
	// store keeps no interactions); treeKey its encoding.
	tree    *InteractionSnapshot
	treeKey string
	// history: every interaction of the window's turns, as last read.
	history []host.Interaction
}

// workspaceView maps session id → the summary key last emitted.
type workspaceView struct {
	keys map[string]string
}

const maxWorkspaceView = 10000

// msgPage is how many messages one reread asks for at a time; maxMsgPages
// bounds one reread (the topic is queued again if more remain).
const (
	msgPage     = 500
	maxMsgPages = 8
)

// refresh rereads canonical state and emits what changed.
func (t *topic) refresh(ctx context.Context, d dirtySet) error {
	t.readMu.Lock()
	defer t.readMu.Unlock()
	if t.kind == kindWorkspace {
		return t.refreshWorkspace(ctx, d)
	}
	return t.refreshSession(ctx, d)
}

// loadLocked reads a session topic's baseline. Caller holds readMu.
func (t *topic) loadLocked(ctx context.Context) error {
	if t.kind != kindSession {
		return nil
	}
	t.mu.Lock()
	loaded := t.loaded
	t.mu.Unlock()
	if loaded {
		return nil
	}
	r, cfg := t.h.cfg.Reader, t.h.cfg
	s, err := r.GetSession(ctx, t.ws, t.sid)
	if err != nil {
		return err
	}
	tp, err := r.ListSessionTurns(ctx, t.ws, t.sid, host.TurnQuery{Limit: cfg.TurnWindow})
	if err != nil {
		return err
	}
	// Only messages at or below the session's version: anything newer is
	// picked up by the first reread (AfterVersion = that version).
	mp, err := r.ListSessionMessages(ctx, t.ws, t.sid, host.MessageQuery{BeforeVersion: s.MessageVersion + 1, Limit: cfg.MessageWindow})
	if err != nil {
		return err
	}
	t.mu.Lock()
	sv := &t.sv
	sv.session, sv.sessionKey = &s, sessionKey(s)
	sv.turns, sv.turnsMore, sv.turnKeys = tp.Turns, tp.HasMore, map[string]string{}
	for _, tr := range tp.Turns {
		sv.turnKeys[tr.ID] = jsonKey(tr)
	}
	sv.msgs, sv.msgBytes, sv.msgsMore, sv.lastVer = map[string]host.Message{}, 0, mp.HasMore, s.MessageVersion
	for _, m := range mp.Messages {
		sv.msgs[m.ID] = m
		sv.msgBytes += msgSize(m)
	}
	t.trimLocked()
	t.loaded = true
	t.mu.Unlock()
	t.root.Store(rootOf(s))
	if err := t.readHistory(ctx); err != nil {
		return err
	}
	if tree, ok, err := t.readTree(ctx, rootOf(s)); err != nil {
		return err
	} else if ok {
		t.mu.Lock()
		t.sv.tree, t.sv.treeKey = &tree, jsonKey(tree)
		t.mu.Unlock()
	}
	// Catch up on anything committed while the baseline was read.
	t.h.markDirty(t, dirtyMark{})
	t.h.markDirty(t, dirtyTree())
	return nil
}

func rootOf(s host.Session) string {
	if s.RootID != "" {
		return s.RootID
	}
	return s.ID
}

// readTree rereads the interaction tree; ok is false when the server keeps
// no interactions. A root that is gone reads as an empty tree.
func (t *topic) readTree(ctx context.Context, root string) (InteractionSnapshot, bool, error) {
	tree, err := t.h.cfg.Reader.GetSessionInteractionTreeSnapshot(ctx, t.ws, root)
	switch host.CodeOf(err) {
	case "":
	case host.CodeUnsupported:
		return InteractionSnapshot{}, false, nil
	case host.CodeNotFound:
		return InteractionSnapshot{RootSessionID: root, Interactions: []host.Interaction{}}, true, nil
	default:
		return InteractionSnapshot{}, false, err
	}
	if tree.Interactions == nil {
		tree.Interactions = []host.Interaction{}
	}
	return InteractionSnapshot{RootSessionID: root, TurnID: tree.RootTurnID, Interactions: tree.Interactions}, true, nil
}

// refreshTree rereads the tree and emits one complete interaction_snapshot
// when it changed. Caller holds readMu.
func (t *topic) refreshTree(ctx context.Context) error {
	root := t.treeRoot()
	if root == "" {
		return nil
	}
	tree, ok, err := t.readTree(ctx, root)
	if err != nil || !ok {
		return err
	}
	if err := t.readHistory(ctx); err != nil {
		return err
	}
	key := jsonKey(tree)
	t.mu.Lock()
	defer t.mu.Unlock()
	if key == t.sv.treeKey {
		return nil
	}
	t.sv.tree, t.sv.treeKey = &tree, key
	t.emit(KindInteractionSnapshot, "interactions:"+root, tree)
	return nil
}

// readHistory rereads the interaction history of the window's turns.
// Caller holds readMu.
func (t *topic) readHistory(ctx context.Context) error {
	t.mu.Lock()
	from, to := host.SeqRange(t.sv.turns)
	t.mu.Unlock()
	if from > to {
		return nil
	}
	hist, err := t.h.cfg.Reader.ListTurnInteractions(ctx, t.ws, t.sid, from, to)
	if err != nil {
		if host.CodeOf(err) == host.CodeNotFound {
			return nil // a removed session: the session reread says so
		}
		return err
	}
	t.mu.Lock()
	t.sv.history = hist
	t.mu.Unlock()
	return nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func (t *topic) refreshSession(ctx context.Context, d dirtySet) error {
	t.mu.Lock()
	loaded := t.loaded
	t.mu.Unlock()
	if !loaded {
		return nil // the first subscriber's baseline load reads fresh state
	}
	if d.treeOnly() {
		return t.refreshTree(ctx)
	}
	r := t.h.cfg.Reader
	s, err := r.GetSession(ctx, t.ws, t.sid)
	if host.CodeOf(err) == host.CodeNotFound {
		t.mu.Lock()
		if t.sv.session != nil {
			t.sv.session, t.sv.sessionKey = nil, ""
			t.emit(KindSessionRemoved, "", SessionRemoved{Workspace: t.ws, SessionID: t.sid})
		}
		t.mu.Unlock()
		return nil
	}
	if err != nil {
		return err
	}
	// Turns before messages, emitted in the other order: a turn read as
	// settled guarantees its final messages are in the message read, so
	// watchers see the content before the status that ends it.
	tp, err := r.ListSessionTurns(ctx, t.ws, t.sid, host.TurnQuery{Limit: t.h.cfg.TurnWindow})
	if err != nil {
		return err
	}
	var extra []host.Turn
	for id := range d.turns {
		if !hasTurn(tp.Turns, id) {
			if tr, err := r.GetTurn(ctx, t.ws, t.sid, id); err == nil {
				extra = append(extra, tr)
			}
		}
	}
	var msgs []host.Message
	after, more := t.sv.lastVer, false // lastVer only changes under readMu
	for i := 0; ; i++ {
		mp, err := r.ListSessionMessages(ctx, t.ws, t.sid, host.MessageQuery{AfterVersion: after, Limit: msgPage})
		if err != nil {
			return err
		}
		msgs = append(msgs, mp.Messages...)
		if n := len(mp.Messages); n > 0 {
			after = mp.Messages[n-1].Version
		}
		if !mp.HasMore || len(mp.Messages) == 0 {
			break
		}
		if i+1 == maxMsgPages {
			more = true
			break
		}
	}
	t.mu.Lock()
	t.applyMessagesLocked(msgs)
	t.applyTurnsLocked(tp, extra)
	t.applySessionLocked(s)
	t.trimLocked()
	t.mu.Unlock()
	if d.tree || d.all {
		if err := t.refreshTree(ctx); err != nil {
			return err
		}
	}
	if more {
		t.h.markDirty(t, dirtyMark{})
	}
	return nil
}

func hasTurn(ts []host.Turn, id string) bool {
	for _, t := range ts {
		if t.ID == id {
			return true
		}
	}
	return false
}

func (t *topic) applySessionLocked(s host.Session) {
	sv := &t.sv
	key := sessionKey(s)
	changed := sv.session == nil || key != sv.sessionKey
	sv.session, sv.sessionKey = &s, key
	if changed {
		t.emit(KindSessionSummary, "session:"+s.ID, SessionSummary{Session: s})
	}
}

func (t *topic) applyTurnsLocked(tp host.TurnPage, extra []host.Turn) {
	sv := &t.sv
	keys := make(map[string]string, len(tp.Turns))
	for i := len(tp.Turns) - 1; i >= 0; i-- { // oldest first
		tr := tp.Turns[i]
		k := jsonKey(tr)
		keys[tr.ID] = k
		if sv.turnKeys[tr.ID] != k {
			t.emit(KindTurnUpdate, "turn:"+tr.ID, TurnUpdate{Turn: tr})
		}
	}
	for _, tr := range extra { // changed turns older than the window
		if sv.turnKeys[tr.ID] != jsonKey(tr) {
			t.emit(KindTurnUpdate, "turn:"+tr.ID, TurnUpdate{Turn: tr})
		}
	}
	sv.turns, sv.turnsMore, sv.turnKeys = tp.Turns, tp.HasMore, keys
}

// applyMessagesLocked emits message_delta when a streaming message only grew
// by appending, and message_update (the complete message) otherwise.
func (t *topic) applyMessagesLocked(msgs []host.Message) {
	sv := &t.sv
	for _, m := range msgs {
		if m.Version > sv.lastVer {
			sv.lastVer = m.Version
		}
		old, ok := sv.msgs[m.ID]
		if ok && old.Version >= m.Version {
			continue // already emitted
		}
		if ok && isAppend(old, m) {
			t.emit(KindMessageDelta, "", MessageDelta{
				SessionID: m.SessionID, TurnID: m.TurnID, MessageID: m.ID,
				Offset: utf16Len(old.Content.Text), Text: m.Content.Text[len(old.Content.Text):],
				Version: m.Version,
			})
		} else {
			t.emit(KindMessageUpdate, "", MessageUpdate{Message: m})
		}
		if ok {
			sv.msgBytes -= msgSize(old)
		}
		sv.msgs[m.ID] = m
		sv.msgBytes += msgSize(m)
	}
}

// isAppend: both versions streaming, the new text extends the old one, and
// nothing else a client shows changed.
func isAppend(old, m host.Message) bool {
	if !old.Streaming || !m.Streaming || len(m.Content.Text) <= len(old.Content.Text) ||
		!strings.HasPrefix(m.Content.Text, old.Content.Text) {
		return false
	}
	return shapeKey(old) == shapeKey(m)
}

// shapeKey is a message without the fields an append changes.
func shapeKey(m host.Message) string {
	m.Content.Text, m.Version, m.UpdatedAt = "", 0, time.Time{}
	return jsonKey(m)
}

// sessionKey ignores the fields every streamed token bumps, so watchers get
// a session_summary for real changes (title, pin, active turn …) only.
func sessionKey(s host.Session) string {
	s.MessageVersion, s.UpdatedAt = 0, time.Time{}
	return jsonKey(s)
}

func jsonKey(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r) // an invalid byte decodes as U+FFFD: one unit, as in JS
	}
	return n
}

func msgSize(m host.Message) int {
	n := 256 + len(m.Content.Text) + len(m.Content.DisplayText)
	if m.Tool != nil {
		n += len(m.Tool.Input) + len(m.Tool.Output)
	}
	return n
}

// trimLocked evicts the oldest changes from the message window until it
// fits, keeping at least one message.
func (t *topic) trimLocked() {
	sv, cfg := &t.sv, t.h.cfg
	if len(sv.msgs) <= cfg.MessageWindow && sv.msgBytes <= cfg.MessageWindowBytes {
		return
	}
	all := sv.sortedMessages()
	for len(all) > 1 && (len(all) > cfg.MessageWindow || sv.msgBytes > cfg.MessageWindowBytes) {
		sv.msgBytes -= msgSize(all[0])
		delete(sv.msgs, all[0].ID)
		all = all[1:]
		sv.msgsMore = true
	}
}

func (sv *sessionView) sortedMessages() []host.Message {
	out := make([]host.Message, 0, len(sv.msgs))
	for _, m := range sv.msgs {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out
}

// sessionSnapshotLocked answers a session subscribe from the view.
func (t *topic) sessionSnapshotLocked() (SessionSnapshot, error) {
	sv := &t.sv
	if sv.session == nil {
		return SessionSnapshot{}, host.Errorf(host.CodeNotFound, "session %s not found", t.sid)
	}
	turns := sv.turns
	if turns == nil {
		turns = []host.Turn{}
	}
	return SessionSnapshot{Session: *sv.session, Turns: turns, TurnsHasMore: sv.turnsMore,
		Messages: sv.sortedMessages(), MessagesHasMore: sv.msgsMore, InteractionTree: sv.tree,
		Interactions: nonNil(sv.history), Presence: t.presenceLocked()}, nil
}

func (t *topic) refreshWorkspace(ctx context.Context, d dirtySet) error {
	r := t.h.cfg.Reader
	type result struct {
		id   string
		s    host.Session
		gone bool
	}
	var res []result
	ids := map[string]bool{}
	for id := range d.sessions {
		ids[id] = true
	}
	if d.all {
		p, err := r.ListSessions(ctx, t.ws, host.SessionQuery{Limit: t.h.cfg.SessionPage})
		if err != nil {
			return err
		}
		for i := len(p.Sessions) - 1; i >= 0; i-- {
			res = append(res, result{id: p.Sessions[i].ID, s: p.Sessions[i]})
			delete(ids, p.Sessions[i].ID)
		}
		t.mu.Lock()
		for id := range t.wv.keys { // known sessions beyond the first page
			if len(ids) >= 256 {
				break
			}
			if !hasSession(p.Sessions, id) {
				ids[id] = true
			}
		}
		t.mu.Unlock()
	}
	sorted := make([]string, 0, len(ids))
	for id := range ids {
		sorted = append(sorted, id)
	}
	sort.Strings(sorted)
	for _, id := range sorted {
		s, err := r.GetSession(ctx, t.ws, id)
		switch {
		case host.CodeOf(err) == host.CodeNotFound:
			res = append(res, result{id: id, gone: true})
		case err != nil:
			return err
		default:
			res = append(res, result{id: id, s: s})
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, x := range res {
		if x.gone {
			if _, known := t.wv.keys[x.id]; known {
				delete(t.wv.keys, x.id)
				t.emit(KindSessionRemoved, "session:"+x.id, SessionRemoved{Workspace: t.ws, SessionID: x.id})
			}
			continue
		}
		t.applyWorkspaceSessionLocked(x.s)
	}
	return nil
}

func hasSession(ss []host.Session, id string) bool {
	for _, s := range ss {
		if s.ID == id {
			return true
		}
	}
	return false
}

func (t *topic) applyWorkspaceSessionLocked(s host.Session) {
	if t.wv.keys == nil {
		t.wv.keys = map[string]string{}
	}
	k := sessionKey(s)
	if t.wv.keys[s.ID] == k {
		return
	}
	if len(t.wv.keys) >= maxWorkspaceView {
		for id := range t.wv.keys { // forgetting one only costs a redundant summary later
			delete(t.wv.keys, id)
			break
		}
	}
	t.wv.keys[s.ID] = k
	t.emit(KindSessionSummary, "session:"+s.ID, SessionSummary{Session: s})
}

// workspaceSnapshotLocked brings existing watchers up to a freshly read
// first page, so the new watcher's snapshot and seq line up. Caller holds
// readMu (the page was read under it) and mu.
func (t *topic) workspaceSnapshotLocked(p host.SessionPage) WorkspaceSnapshot {
	for i := len(p.Sessions) - 1; i >= 0; i-- {
		t.applyWorkspaceSessionLocked(p.Sessions[i])
	}
	if p.Sessions == nil {
		p.Sessions = []host.Session{}
	}
	return WorkspaceSnapshot{Sessions: p.Sessions, NextCursor: p.NextCursor, Presence: t.presenceLocked()}
}
