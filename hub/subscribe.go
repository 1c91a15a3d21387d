package hub

import (
	"context"
	"slices"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/protocol"
)

// Topic kinds a client subscribes to.
const (
	TopicWorkspace = "workspace"
	TopicSession   = "session"
)

// SubscribeRequest is a decoded subscribe operation. Authorization is the
// caller's job.
type SubscribeRequest struct {
	Workspace string
	Topic     string
	SessionID string
	Resume    *protocol.Resume
	// Position resumes a session topic on any replica (resume.go); Resume
	// is tried first, and only matches the replica that served it.
	Position *protocol.Position
}

// Subscribe registers c on a topic. reply is called under the topic's
// emission lock and must enqueue the response on c (Conn.Send): that is
// what guarantees the response reaches the client before any event above
// its seq. Subscribing again to the same topic answers afresh.
func (h *Hub) Subscribe(ctx context.Context, c *Conn, req SubscribeRequest, reply func(protocol.SubscribeResult)) error {
	kind := kindWorkspace
	switch req.Topic {
	case TopicWorkspace:
		if req.SessionID != "" {
			return host.Errorf(host.CodeInvalidInput, "a workspace topic takes no sessionId")
		}
	case TopicSession:
		kind = kindSession
		if req.SessionID == "" {
			return host.Errorf(host.CodeInvalidInput, "sessionId is required for a session topic")
		}
	default:
		return host.Errorf(host.CodeInvalidInput, "topic must be workspace or session")
	}
	if req.Workspace == "" {
		return host.Errorf(host.CodeInvalidInput, "workspace is required")
	}
	if req.Position != nil {
		if err := validPosition(req.Position, kind); err != nil {
			return err
		}
	}
	t, err := h.acquire(kind, req.Workspace, req.SessionID)
	if err != nil {
		return err
	}
	held := true // our reference passes to the registration
	defer func() {
		if held {
			h.release(t)
		}
	}()

	t.readMu.Lock()
	defer t.readMu.Unlock()
	t.sideMu.Lock()
	defer t.sideMu.Unlock()
	if err := t.loadLocked(ctx); err != nil {
		return err
	}
	var page host.SessionPage
	resumed := false
	if r := req.Resume; r != nil && r.Epoch == t.epoch {
		t.mu.Lock()
		_, resumed = t.ring.since(r.Seq, t.seq)
		t.mu.Unlock()
	}
	var read *host.Changes
	byPosition := !resumed && req.Position != nil && req.Position.Epoch == t.streamEpoch
	if byPosition {
		if read, err = t.prepareResume(ctx, req.Position.Version); err != nil {
			return err
		}
	}
	if kind == kindWorkspace && !resumed {
		if page, err = h.cfg.Reader.ListSessions(ctx, t.ws, host.SessionQuery{Limit: h.cfg.SessionPage}); err != nil {
			return err
		}
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	var res protocol.SubscribeResult
	var replay []*event
	ok := false
	if resumed {
		// Deltas emit without readMu, so the ring may have moved on since
		// the check above: look again under the emission lock.
		if replay, ok = t.ring.since(req.Resume.Seq, t.seq); ok {
			res = protocol.SubscribeResult{Sub: t.name, Epoch: t.epoch, Seq: req.Resume.Seq, Recovered: true}
			if v := t.ring.verAt(req.Resume.Seq); v > 0 && kind == kindSession {
				res.Position = &protocol.Position{Epoch: t.streamEpoch, Version: v}
			}
		}
	} else if byPosition {
		res, replay, ok = t.resumeLocked(req.Position.Version, read)
	}
	if !ok && kind == kindSession {
		snap, err := t.sessionSnapshotLocked()
		if err != nil {
			return err
		}
		res = protocol.SubscribeResult{Sub: t.name, Epoch: t.epoch, Seq: t.seq, Snapshot: snap, Position: t.positionLocked()}
	} else if !ok {
		if resumed { // unreachable: only rereads, under readMu, emit on workspace topics
			return host.Errorf(host.CodeUnavailable, "resume raced with new events; subscribe again")
		}
		res = protocol.SubscribeResult{Sub: t.name, Epoch: t.epoch, Seq: t.seq, Snapshot: t.workspaceSnapshotLocked(page)}
	}
	c.subMu.Lock()
	if c.detached {
		c.subMu.Unlock()
		return &host.Error{Code: host.CodeUnavailable, Reason: "connection_closed", Message: "connection closed"}
	}
	if _, again := t.subs[c]; !again {
		t.subs[c] = struct{}{}
		c.subs = append(c.subs, t)
		t.watched.Store(true)
		held = false
	}
	c.subMu.Unlock()
	h.presenceWake()
	reply(res)
	for _, ev := range replay {
		if c.enqueueEvent(ev) {
			h.spawn(c.flush)
		}
	}
	return nil
}

// Unsubscribe removes c from the named topic of workspace ws. It reports
// false when c had no such subscription.
func (h *Hub) Unsubscribe(c *Conn, ws, sub string) bool {
	c.subMu.Lock()
	t := c.sub(sub)
	c.subMu.Unlock()
	if t == nil || t.ws != ws {
		return false
	}
	if !h.unregister(c, t) {
		return false
	}
	h.release(t)
	h.presenceWake()
	return true
}

// unregister removes c from t if it is still registered there.
func (h *Hub) unregister(c *Conn, t *topic) bool {
	t.mu.Lock()
	c.subMu.Lock()
	ok := c.sub(t.name) == t
	if ok {
		c.subs = slices.DeleteFunc(c.subs, func(x *topic) bool { return x == t })
		delete(t.subs, c)
	}
	c.subMu.Unlock()
	t.mu.Unlock()
	return ok
}

// Subscription describes one of a connection's subscriptions.
type Subscription struct {
	Sub       string
	Workspace string
}

// Subscriptions lists c's subscriptions.
func (c *Conn) Subscriptions() []Subscription {
	c.subMu.Lock()
	defer c.subMu.Unlock()
	out := make([]Subscription, 0, len(c.subs))
	for _, t := range c.subs {
		out = append(out, Subscription{Sub: t.name, Workspace: t.ws})
	}
	return out
}

// sub finds c's subscription by topic name. Caller holds c.subMu.
func (c *Conn) sub(name string) *topic {
	for _, t := range c.subs {
		if t.name == name {
			return t
		}
	}
	return nil
}
