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
// on the calling goroutine, after the topic lock is released: a streamed
// chunk reaches its watchers without a hand-off to a writer each.
func (t *topic) applyDelta(d *host.TranscriptDelta) bool {
	return t.applyWriting(func() bool { return t.applyDeltaLocked(d) })
}

// applyWriting runs apply under the emission lock and then writes what it
// emitted to the watchers whose sockets take it at once, on this
// goroutine.
func (t *topic) applyWriting(apply func() bool) bool {
	var start []*Conn
	t.mu.Lock()
	t.writeAfter = &start
	ok := apply()
	t.writeAfter = nil
	t.mu.Unlock()
	for _, c := range start {
		c.writeNow()
	}
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
		if ch.Message == nil && old != nil && old.m.Streaming && v.m.Streaming && ch.Tool == nil && ch.Text != "" {
			t.emitAt(protocol.KindMessageDelta, "", protocol.MessageDelta{
				SessionID: t.sid, TurnID: v.m.TurnID, MessageID: v.m.ID,
				Offset: ch.Offset, Text: ch.Text, Version: v.m.Version, UpdatedAt: v.m.UpdatedAt,
			}, ver)
		} else {
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
