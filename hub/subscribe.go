package hub

import (
	"context"

	"github.com/ensemble-dev/ensemble/host"
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
	Resume    *Resume
}

// Resume is the position a reconnecting client last saw.
type Resume struct {
	Epoch string `json:"epoch"`
	Seq   int64  `json:"seq"`
}

// SubscribeResult answers subscribe. Recovered: the missed events (seq
// above the resume seq) follow this result and Seq is the resume seq.
// Otherwise Snapshot is the complete current state and events with seq
// above Seq follow.
type SubscribeResult struct {
	Sub       string `json:"sub"`
	Epoch     string `json:"epoch"`
	Seq       int64  `json:"seq"`
	Recovered bool   `json:"recovered"`
	Snapshot  any    `json:"snapshot,omitempty"`
}

// Subscribe registers c on a topic. reply is called under the topic's
// emission lock and must enqueue the response on c (Conn.Send): that is
// what guarantees the response reaches the client before any event above
// its seq. Subscribing again to the same topic answers afresh.
func (h *Hub) Subscribe(ctx context.Context, c *Conn, req SubscribeRequest, reply func(SubscribeResult)) error {
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
	if kind == kindWorkspace && !resumed {
		if page, err = h.cfg.Reader.ListSessions(ctx, t.ws, host.SessionQuery{Limit: h.cfg.SessionPage}); err != nil {
			return err
		}
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	res := SubscribeResult{Sub: t.name, Epoch: t.epoch}
	var replay []*event
	if resumed {
		// Only this topic's readers and emitters move seq, and we hold
		// readMu, so the ring still holds what it held a moment ago.
		replay, _ = t.ring.since(req.Resume.Seq, t.seq)
		res.Seq, res.Recovered = req.Resume.Seq, true
	} else if kind == kindSession {
		snap, err := t.sessionSnapshotLocked()
		if err != nil {
			return err
		}
		res.Seq, res.Snapshot = t.seq, snap
	} else {
		snap := t.workspaceSnapshotLocked(page)
		res.Seq, res.Snapshot = t.seq, snap
	}
	c.subMu.Lock()
	if c.detached {
		c.subMu.Unlock()
		return host.Errorf(host.CodeUnavailable, "connection closed")
	}
	if _, again := t.subs[c]; !again {
		t.subs[c] = struct{}{}
		c.subs[t.name] = t
		t.watched.Store(true)
		held = false
	}
	c.subMu.Unlock()
	h.presenceWake()
	reply(res)
	for _, ev := range replay {
		c.enqueueEvent(ev)
	}
	return nil
}

// Unsubscribe removes c from the named topic of workspace ws. It reports
// false when c had no such subscription.
func (h *Hub) Unsubscribe(c *Conn, ws, sub string) bool {
	c.subMu.Lock()
	t := c.subs[sub]
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
	ok := c.subs[t.name] == t
	if ok {
		delete(c.subs, t.name)
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
	for name, t := range c.subs {
		out = append(out, Subscription{Sub: name, Workspace: t.ws})
	}
	return out
}
