package hub

import (
	"context"
	"sort"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/protocol"
)

// workspaceView maps session id → the summary last emitted.
type workspaceView struct {
	sent map[string]host.Session
}

const maxWorkspaceView = 10000

// msgPage is how many messages one reread reads at most; the topic is
// queued again if more remain.
const msgPage = 1000

// refresh rereads canonical state and emits what changed.
func (t *topic) refresh(ctx context.Context, d dirtySet) error {
	if t.kind == kindSession && !d.main() && (d.tree || d.queue) {
		t.sideMu.Lock()
		defer t.sideMu.Unlock()
		return t.refreshSession(ctx, d)
	}
	t.readMu.Lock()
	defer t.readMu.Unlock()
	t.sideMu.Lock()
	defer t.sideMu.Unlock()
	if t.kind == kindWorkspace {
		return t.refreshWorkspace(ctx, d)
	}
	return t.refreshSession(ctx, d)
}

// loadLocked reads a session topic's baseline. Caller holds readMu and
// sideMu.
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
	cfg := t.h.cfg
	c, err := cfg.Reader.SessionChanges(ctx, t.ws, t.sid, host.ChangesQuery{
		Newest: true, Messages: cfg.MessageWindow, Turns: cfg.TurnWindow})
	if err != nil {
		return err
	}
	s := c.Session
	t.mu.Lock()
	sv := &t.sv
	sv.session = &s
	sv.turns, sv.turnsMore, sv.sentTurns = c.Turns, c.TurnsHasMore, map[string]host.Turn{}
	for _, tr := range c.Turns {
		sv.sentTurns[tr.ID] = tr
	}
	sv.msgs, sv.msgBytes, sv.msgsMore = map[string]*viewMsg{}, 0, c.MessagesHasMore
	sv.lastVer, sv.clean, sv.floor = s.MessageVersion, true, 0
	if c.MessagesHasMore && len(c.Messages) > 0 {
		sv.floor = c.Messages[0].Version - 1
	}
	for _, m := range c.Messages {
		sv.put(newViewMsg(m))
	}
	t.streamEpoch = streamEpochOf(s)
	t.trimLocked()
	t.loaded = true
	t.mu.Unlock()
	t.root.Store(rootOf(s))
	if err := t.readHistory(ctx); err != nil {
		return err
	}
	if err := t.readGoal(ctx); err != nil {
		return err
	}
	tree, err := t.readTree(ctx, rootOf(s))
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.sv.tree = &tree
	t.mu.Unlock()
	if q, ok, err := t.readQueue(ctx); err != nil {
		return err
	} else if ok {
		t.mu.Lock()
		t.sv.queue = &q
		t.mu.Unlock()
	}
	// Catch up on anything committed while the baseline was read.
	t.h.markDirty(t, dirtyMark{})
	t.h.markDirty(t, dirtyTree())
	t.h.markDirty(t, dirtyQueue())
	return nil
}

func rootOf(s host.Session) string {
	if s.RootID != "" {
		return s.RootID
	}
	return s.ID
}

// readTree rereads the interaction tree. A root that is gone reads as an
// empty tree.
func (t *topic) readTree(ctx context.Context, root string) (protocol.InteractionSnapshot, error) {
	tree, err := t.h.cfg.Reader.GetSessionInteractionTreeSnapshot(ctx, t.ws, root)
	switch host.CodeOf(err) {
	case "":
	case host.CodeNotFound:
		return protocol.InteractionSnapshot{RootSessionID: root, Interactions: []protocol.Interaction{}}, nil
	default:
		return protocol.InteractionSnapshot{}, err
	}
	return protocol.InteractionSnapshot{RootSessionID: root, TurnID: tree.RootTurnID, Interactions: protocol.FromInteractions(nonNil(tree.Interactions))}, nil
}

// refreshTree rereads the tree and emits one complete interaction_snapshot
// when it changed. Caller holds sideMu.
func (t *topic) refreshTree(ctx context.Context) error {
	root := t.treeRoot()
	if root == "" {
		return nil
	}
	tree, err := t.readTree(ctx, root)
	if err != nil {
		return err
	}
	if err := t.readHistory(ctx); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sv.tree != nil && same(*t.sv.tree, tree) {
		return nil
	}
	t.sv.tree = &tree
	t.emit(protocol.KindInteractionSnapshot, "interactions:"+root, tree)
	return nil
}

// readHistory rereads the interaction history of the window's turns.
// Caller holds sideMu.
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
	if d.queue || d.all {
		if err := t.refreshQueue(ctx); err != nil {
			return err
		}
		if !d.tree && !d.transcript && !d.rest && !d.all {
			return nil // only the queue changed
		}
	}
	if d.treeOnly() {
		return t.refreshTree(ctx)
	}
	t.mu.Lock()
	after := t.sv.lastVer
	t.mu.Unlock()
	turnIDs := make([]string, 0, len(d.turns))
	for id := range d.turns {
		if id != "" {
			turnIDs = append(turnIDs, id)
		}
	}
	noTurns := d.messagesOnly()
	c, err := t.h.cfg.Reader.SessionChanges(ctx, t.ws, t.sid, host.ChangesQuery{
		AfterVersion: after, Messages: msgPage, Turns: t.h.cfg.TurnWindow, TurnIDs: turnIDs, NoTurns: noTurns})
	if host.CodeOf(err) == host.CodeNotFound {
		t.mu.Lock()
		if t.sv.session != nil {
			t.sv.session = nil
			t.emit(protocol.KindSessionRemoved, "", protocol.SessionRemoved{Workspace: t.ws, SessionID: t.sid})
		}
		t.mu.Unlock()
		return nil
	}
	if err != nil {
		return err
	}
	// One read transaction: the turns and the messages are one committed
	// state, so a turn read as settled comes with its final messages.
	// Messages are emitted first so watchers see the content before the
	// status that ends it.
	t.mu.Lock()
	t.applyMessagesLocked(c.Messages, c.Session.MessageVersion, !c.MessagesHasMore)
	if !noTurns {
		t.applyTurnsLocked(host.TurnPage{Turns: c.Turns, HasMore: c.TurnsHasMore}, c.Extra)
	}
	t.applySessionLocked(c.Session)
	t.trimLocked()
	t.mu.Unlock()
	if d.tree || d.all {
		if err := t.refreshTree(ctx); err != nil {
			return err
		}
	}
	if c.MessagesHasMore {
		t.h.markDirty(t, dirtyTranscript())
	}
	return nil
}

func (t *topic) applySessionLocked(s host.Session) {
	sv := &t.sv
	if sv.session != nil && sv.session.MessageVersion > s.MessageVersion {
		// Deltas applied while this was read moved the view further.
		s.MessageVersion, s.UpdatedAt = sv.session.MessageVersion, sv.session.UpdatedAt
	}
	changed := sv.session == nil || !sameSummary(*sv.session, s)
	sv.session = &s
	if changed {
		t.emit(protocol.KindSessionSummary, "session:"+s.ID, protocol.SessionSummary{Session: protocol.FromSession(s)})
	}
}

func (t *topic) applyTurnsLocked(tp host.TurnPage, extra []host.Turn) {
	sv := &t.sv
	sent := make(map[string]host.Turn, len(tp.Turns))
	for i := len(tp.Turns) - 1; i >= 0; i-- { // oldest first
		tr := tp.Turns[i]
		sent[tr.ID] = tr
		if old, ok := sv.sentTurns[tr.ID]; !ok || !sameTurn(old, tr) {
			t.emit(protocol.KindTurnUpdate, "turn:"+tr.ID, protocol.TurnUpdate{Turn: protocol.FromTurn(tr)})
		}
	}
	for _, tr := range extra { // changed turns older than the window
		if old, ok := sv.sentTurns[tr.ID]; !ok || !sameTurn(old, tr) {
			t.emit(protocol.KindTurnUpdate, "turn:"+tr.ID, protocol.TurnUpdate{Turn: protocol.FromTurn(tr)})
		}
	}
	sv.turns, sv.turnsMore, sv.sentTurns = tp.Turns, tp.HasMore, sent
}

// applyMessagesLocked emits message_delta when a streaming message only grew
// by appending (with done when that ended its streaming, see emitClose),
// and message_update (the complete message) otherwise. msgs
// were read at head (complete: nothing above head is missing); what the
// view already holds (a version at or below lastVer) is skipped.
func (t *topic) applyMessagesLocked(msgs []host.Message, head int64, complete bool) {
	sv := &t.sv
	n := 0
	for _, m := range msgs {
		if m.Version > sv.lastVer {
			msgs[n] = m
			n++
		}
	}
	msgs = msgs[:n]
	for i, m := range msgs {
		// Only the last event of a complete read leaves the view at a
		// committed state: before it, later changes of earlier messages
		// are still missing.
		var ver int64
		if complete && i == len(msgs)-1 && m.Version == head {
			ver = head
		}
		old := sv.msgs[m.ID]
		switch {
		case old != nil && isAppend(old, m):
			t.emitAt(protocol.KindMessageDelta, "", appended(old, m), ver)
		case old != nil && isClose(old, m):
			t.emitClose(appended(old, m), protocol.FromMessage(m), ver)
		default:
			t.emitAt(protocol.KindMessageUpdate, "", protocol.MessageUpdate{Message: protocol.FromMessage(m)}, ver)
		}
		sv.put(newViewMsg(m))
		sv.lastVer = m.Version
	}
	if complete && head >= sv.lastVer {
		sv.lastVer, sv.clean = head, true
	} else if !complete && n > 0 {
		sv.clean = false
	}
}

// isAppend: both versions streaming, the new text extends the old one, and
// nothing else a client shows changed.
func isAppend(old *viewMsg, m host.Message) bool {
	return m.Streaming && len(m.Content.Text) > old.n && extends(old, m)
}

// appended is the delta from old to m, which extends it.
func appended(old *viewMsg, m host.Message) protocol.MessageDelta {
	return protocol.MessageDelta{SessionID: m.SessionID, TurnID: m.TurnID, MessageID: m.ID,
		Offset: old.u16, Text: m.Content.Text[old.n:], Version: m.Version, UpdatedAt: m.UpdatedAt}
}

// isClose: the streaming message ended, its text extends (or is) the old
// one, and nothing else a client shows changed.
func isClose(old *viewMsg, m host.Message) bool {
	if m.Streaming {
		return false
	}
	m.Streaming = true // the one change besides the text
	return extends(old, m)
}

// extends: old was streaming, m's text starts with old's, and nothing
// else a client shows differs.
func extends(old *viewMsg, m host.Message) bool {
	return old.m.Streaming && len(m.Content.Text) >= old.n &&
		m.Content.Text[:old.n] == old.text() && sameShape(old.m, m)
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
		for id := range t.wv.sent { // known sessions beyond the first page
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
			if _, known := t.wv.sent[x.id]; known {
				delete(t.wv.sent, x.id)
				t.emit(protocol.KindSessionRemoved, "session:"+x.id, protocol.SessionRemoved{Workspace: t.ws, SessionID: x.id})
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
	if t.wv.sent == nil {
		t.wv.sent = map[string]host.Session{}
	}
	if old, ok := t.wv.sent[s.ID]; ok && sameSummary(old, s) {
		// Nothing new to show; kept as the newest state a later fact is
		// ordered against (host.Session.Succeeds).
		t.wv.sent[s.ID] = s
		return
	}
	if len(t.wv.sent) >= maxWorkspaceView {
		for id := range t.wv.sent { // forgetting one only costs a redundant summary later
			delete(t.wv.sent, id)
			break
		}
	}
	t.wv.sent[s.ID] = s
	t.emit(protocol.KindSessionSummary, "session:"+s.ID, protocol.SessionSummary{Session: protocol.FromSession(s)})
}

// workspaceSnapshotLocked brings existing watchers up to a freshly read
// first page, so the new watcher's snapshot and seq line up. Caller holds
// readMu (the page was read under it) and mu.
func (t *topic) workspaceSnapshotLocked(p host.SessionPage) protocol.WorkspaceSnapshot {
	for i := len(p.Sessions) - 1; i >= 0; i-- {
		t.applyWorkspaceSessionLocked(p.Sessions[i])
	}
	if p.Sessions == nil {
		p.Sessions = []host.Session{}
	}
	return protocol.WorkspaceSnapshot{Sessions: protocol.FromSessions(p.Sessions), NextCursor: p.NextCursor, Presence: t.presenceLocked()}
}
