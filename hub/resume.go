package hub

import (
	"context"
	"sort"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/protocol"
)

// validPosition checks a position's shape (the caller checks its epoch).
func validPosition(p *protocol.Position, kind topicKind) error {
	switch {
	case kind != kindSession:
		return host.Errorf(host.CodeInvalidInput, "a position resumes session topics only")
	case p.Epoch == "" || len(p.Epoch) > 64:
		return host.Errorf(host.CodeInvalidInput, "position epoch must be 1 to 64 characters")
	case p.Version < 0:
		return host.Errorf(host.CodeInvalidInput, "position version must not be negative")
	}
	return nil
}

// catchUpPages bounds the store reads a resume makes to bring a lagging
// view up to the client's position.
const catchUpPages = 10

// prepareResume brings the view up to the position and reads from the store
// what the view's window no longer holds. Caller holds readMu. A nil result
// with a nil error means "answer with a snapshot".
func (t *topic) prepareResume(ctx context.Context, v int64) (*host.Changes, error) {
	t.mu.Lock()
	lastVer, floor := t.sv.lastVer, t.sv.floor
	_, _, inRing := t.ring.after(v)
	t.mu.Unlock()
	for page := 0; v > lastVer; page++ {
		// The client saw a commit this replica's bus has not delivered
		// yet: catch up from the store (a read takes msgPage messages),
		// then judge again; one this far behind gets a snapshot.
		if page == catchUpPages {
			return nil, nil
		}
		if err := t.refreshSession(ctx, dirtySet{rest: true}); err != nil {
			return nil, err
		}
		t.mu.Lock()
		lastVer = t.sv.lastVer
		sess := t.sv.session
		t.mu.Unlock()
		switch {
		case sess == nil:
			return nil, host.Errorf(host.CodeNotFound, "session %s not found", t.sid)
		case v > sess.MessageVersion:
			return nil, host.Errorf(host.CodeInvalidInput, "position version %d is ahead of the session (at %d)", v, sess.MessageVersion)
		}
	}
	if inRing || v >= floor {
		return nil, nil
	}
	c, err := t.h.cfg.Reader.SessionChanges(ctx, t.ws, t.sid, host.ChangesQuery{
		AfterVersion: v, Messages: t.h.cfg.CatchUpMessages, Turns: t.h.cfg.TurnWindow})
	if err != nil || c.MessagesHasMore {
		return nil, err // too old: a snapshot
	}
	return &c, nil
}

// resumeLocked answers a subscribe from position v, from the ring (the
// exact events after it), from the window, or from a store read (read has
// the changes after v). ok is false when none can: the caller answers with
// a snapshot. Caller holds readMu and mu.
func (t *topic) resumeLocked(v int64, read *host.Changes) (res protocol.SubscribeResult, replay []*event, ok bool) {
	sv := &t.sv
	if sv.session == nil || v > sv.lastVer {
		return res, nil, false
	}
	presence := t.presenceLocked()
	ch := &protocol.SessionChanges{Session: protocol.FromSession(*sv.session),
		Turns: nonNil(protocol.FromTurns(sv.turns)), Messages: []protocol.Message{},
		InteractionTree: sv.tree, Presence: &presence, Goal: t.goalLocked(), Queue: sv.queue}
	res = protocol.SubscribeResult{Sub: t.name, Epoch: t.epoch, Recovered: true, Changes: ch}
	if evs, seq, found := t.ring.after(v); found {
		res.Seq, res.Position = seq, &protocol.Position{Epoch: t.streamEpoch, Version: v}
		return res, evs, true
	}
	res.Seq, res.Position = t.seq, t.positionLocked()
	if v >= sv.floor {
		ch.Messages = protocol.FromMessages(sv.messagesAfter(v))
		return res, nil, true
	}
	if read == nil || read.Session.MessageVersion < sv.floor {
		return res, nil, false
	}
	// Merge the store's changes with the view's newer ones by version.
	byID := make(map[string]host.Message, len(read.Messages))
	for _, m := range read.Messages {
		byID[m.ID] = m
	}
	for _, m := range sv.messagesAfter(read.Session.MessageVersion) {
		byID[m.ID] = m
	}
	for _, m := range byID {
		ch.Messages = append(ch.Messages, protocol.FromMessage(m))
	}
	sort.Slice(ch.Messages, func(i, j int) bool { return ch.Messages[i].Version < ch.Messages[j].Version })
	if s := read.Session.MessageVersion; s > sv.lastVer {
		res.Position = &protocol.Position{Epoch: t.streamEpoch, Version: s}
	}
	return res, nil, true
}
