package hub

import (
	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/protocol"
)

// applyDelta applies a committed transcript delta to a session topic's view
// and emits its events, each encoded once. The delta is the committed change
// itself, so no store read is needed. It reports false when the topic cannot
// apply it (a gap, an overlap with a partial reread, or an append to a
// message outside the window); the caller then marks the topic for a reread.
// A delta at or below the view's version is a duplicate and is dropped.
//
// The events are written to the watchers whose sockets take them at once
// on the calling goroutine when w is written: a streamed chunk reaches its
// watchers without a hand-off to a writer each.
func (t *topic) applyDelta(d *host.TranscriptDelta, w *writeScope) bool {
	return t.applyWriting(w, func() bool { return t.applyDeltaLocked(d) })
}

// writeScope collects the watchers whose write side an emission handed to
// the applying goroutine (push reported start), so that the events of
// several facts go out in one write per watcher when write is called.
type writeScope struct{ conns []*Conn }

// write writes what is queued for each collected watcher, on this
// goroutine where the socket takes it at once (Conn.writeNow).
func (w *writeScope) write() {
	for _, c := range w.conns {
		c.writeNow()
	}
	w.conns = w.conns[:0]
}

// applyWriting runs apply under the emission lock, collecting in w the
// watchers whose writer it must start; the caller writes w.
func (t *topic) applyWriting(w *writeScope, apply func() bool) bool {
	t.mu.Lock()
	t.writeAfter = &w.conns
	ok := apply()
	t.writeAfter = nil
	t.mu.Unlock()
	return ok
}

func (t *topic) applyDeltaLocked(d *host.TranscriptDelta) bool {
	sv := &t.sv
	switch {
	case !t.loaded:
		return true // the baseline load reads past it and rereads what follows
	case sv.session == nil:
		return false
	case d.ToVersion <= sv.lastVer:
		t.h.stats.deltaDups.Add(1)
		return true
	case d.FromVersion != sv.lastVer || d.ToVersion < d.FromVersion:
		return false
	}
	next, ok := t.deltaMessages(d)
	if !ok {
		return false
	}
	for i, v := range next {
		ch := &d.Messages[i]
		// Every event of a delta is a position: a replica applying the same
		// delta passes through exactly the same states.
		ver := v.m.Version
		if i == len(next)-1 {
			ver = d.ToVersion
		}
		old := sv.msgs[v.m.ID]
		appended := ch.Message == nil && old != nil && old.m.Streaming && ch.Tool == nil
		md := protocol.MessageDelta{SessionID: t.sid, TurnID: v.m.TurnID, MessageID: v.m.ID,
			Offset: ch.Offset, Text: ch.Text, Version: v.m.Version, UpdatedAt: v.m.UpdatedAt}
		switch {
		case appended && v.m.Streaming && ch.Text != "":
			t.emitAt(protocol.KindMessageDelta, "", md, ver)
		case appended && !v.m.Streaming:
			t.emitClose(md, protocol.FromMessage(v.message()), ver)
		default:
			t.emitAt(protocol.KindMessageUpdate, "", protocol.MessageUpdate{Message: protocol.FromMessage(v.message())}, ver)
		}
		sv.put(v)
	}
	sv.lastVer, sv.clean = d.ToVersion, true
	if sv.session.MessageVersion < d.ToVersion {
		s := *sv.session
		s.MessageVersion = d.ToVersion
		if !d.At.IsZero() {
			s.UpdatedAt = d.At
		}
		sv.session = &s
	}
	t.trimLocked()
	t.h.stats.deltas.Add(1)
	return true
}

// deltaMessages checks a whole delta against the view before anything is
// emitted (a delta applies completely or not at all) and builds the new
// window entries, in the delta's order.
func (t *topic) deltaMessages(d *host.TranscriptDelta) ([]*viewMsg, bool) {
	sv := &t.sv
	out := make([]*viewMsg, 0, len(d.Messages))
	prev := d.FromVersion
	for i := range d.Messages {
		ch := &d.Messages[i]
		var v *viewMsg
		if m := ch.Message; m != nil {
			if m.WorkspaceID != t.ws || m.SessionID != t.sid {
				return nil, false
			}
			v = newViewMsg(*m)
		} else {
			old := sv.msgs[ch.ID]
			if old == nil || ch.Offset != old.u16 || (ch.TurnID != "" && ch.TurnID != old.m.TurnID) {
				return nil, false
			}
			v = old.appended(ch.Text)
			v.m.Version = ch.Version
			if !ch.UpdatedAt.IsZero() {
				v.m.UpdatedAt = ch.UpdatedAt
			}
			if ch.Tool != nil {
				v.m.Tool = ch.Tool
			}
			if ch.Done {
				v.m.Streaming = false
			}
		}
		if v.m.Version <= prev || v.m.Version > d.ToVersion {
			return nil, false
		}
		prev = v.m.Version
		out = append(out, v)
	}
	return out, true
}
