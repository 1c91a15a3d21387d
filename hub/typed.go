package hub

import (
	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/protocol"
)

// Typed turn facts: a fact that carries its committed Turn (and the session,
// when the same transaction wrote it) is applied to the topics without a
// store read, the way a transcript delta is. The reread stays the answer
// whenever the topic cannot be sure the fact is the next state to show: a
// reread of messages, turns or the session is queued or running (it may owe
// messages that must go before the Turn's status), the view's transcript is
// behind the session the fact carries, or the topic is not loaded. The
// caller then marks the topic dirty as for an untyped fact.

// applyTypedTurn applies f to a session topic; false: reread instead.
func (t *topic) applyTypedTurn(f host.Fact, w *writeScope) bool {
	// readMu orders this apply with every reread: one holding it now may
	// apply what it read after this; one starting later reads at least
	// this commit (facts are published after their commit).
	if !t.readMu.TryLock() {
		return false
	}
	defer t.readMu.Unlock()
	if t.h.rereadOwed(t) {
		return false
	}
	ok := t.applyWriting(w, func() bool { return t.applyTypedTurnLocked(*f.Turn, f.Session) })
	if ok {
		t.h.stats.typedTurns.Add(1)
	}
	return ok
}

func (t *topic) applyTypedTurnLocked(tr host.Turn, s *host.Session) bool {
	sv := &t.sv
	if !t.loaded || sv.session == nil || !sv.clean {
		return false
	}
	if s != nil && (s.MessageVersion > sv.lastVer || streamEpochOf(*s) != t.streamEpoch) {
		return false // messages the fact's state includes are not shown yet
	}
	old, inWindow := sv.sentTurns[tr.ID]
	// A reread that ran between this commit and its publish may have shown
	// a later state already, and the relay may publish an older fact after
	// a newer one. (UpdatedAt is the Host's millisecond clock; within one
	// millisecond the later fact, right behind, corrects it, and a settled
	// Turn is never shown unsettled again: host.Turn.Succeeds.)
	if inWindow && !tr.Succeeds(old) {
		return true
	}
	kept := true // the Turn is in the window after this
	switch {
	case inWindow:
		for i := range sv.turns {
			if sv.turns[i].ID == tr.ID {
				sv.turns[i] = tr
			}
		}
	case len(sv.turns) == 0 || tr.Seq > sv.turns[0].Seq:
		sv.turns = append([]host.Turn{tr}, sv.turns...)
		if w := t.h.cfg.TurnWindow; len(sv.turns) > w {
			for _, gone := range sv.turns[w:] {
				delete(sv.sentTurns, gone.ID)
			}
			sv.turns, sv.turnsMore = sv.turns[:w:w], true
		}
	case !sv.turnsMore || tr.Seq >= sv.turns[len(sv.turns)-1].Seq:
		return false // inside the window yet unknown: reread
	default:
		kept = false // older than the window: shown, not kept (as a reread does)
	}
	if !inWindow || !sameTurn(old, tr) {
		t.emit(protocol.KindTurnUpdate, "turn:"+tr.ID, protocol.TurnUpdate{Turn: protocol.FromTurn(tr)})
	}
	if kept {
		sv.sentTurns[tr.ID] = tr
	}
	if s != nil && s.Succeeds(*sv.session) {
		cur := *s
		cur.Goal = sv.session.Goal // read with the session, never carried
		t.applySessionLocked(cur)
	}
	return true
}

// applyTypedSession applies a session a turn fact carries to a workspace
// topic that already lists it; false: reread instead.
func (t *topic) applyTypedSession(s host.Session) bool {
	if s.Provisional || s.DeletedAt != nil || !t.readMu.TryLock() {
		return false
	}
	defer t.readMu.Unlock()
	if t.h.rereadOwed(t) {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old, ok := t.wv.sent[s.ID]
	if !ok {
		return false // not listed yet: the reread decides whether it shows
	}
	if s.Succeeds(old) {
		s.Goal = old.Goal
		t.applyWorkspaceSessionLocked(s)
	}
	t.h.stats.typedTurns.Add(1)
	return true
}

// rereadOwed: a reread of t that may read messages, turns or the session
// is queued or running. One of the interaction tree or the queue alone is
// no reason to wait: those are shown apart from the Turn.
func (h *Hub) rereadOwed(t *topic) bool {
	h.dmu.Lock()
	defer h.dmu.Unlock()
	return t.dirty.main() || t.running && t.reading.main()
}

// onTypedTurn applies a typed turn fact to the session's topic and, when
// the fact carries the session, to its workspace topic; a topic that
// cannot take it rereads as for an untyped fact. A fact without a session
// left the session row as it was, so the workspace list has nothing to
// change.
func (h *Hub) onTypedTurn(f host.Fact, w *writeScope) {
	h.mu.Lock()
	var ws, st *topic
	if e := h.workspaces[f.WorkspaceID]; e != nil {
		ws, st = e.ws, e.sessions[f.SessionID]
	}
	h.mu.Unlock()
	if ws != nil && f.Session != nil && !ws.applyTypedSession(*f.Session) {
		h.markDirty(ws, dirtySession(f.SessionID))
	}
	if st != nil && !st.applyTypedTurn(f, w) {
		h.markDirty(st, dirtyTurn(f.TurnID))
	}
}
