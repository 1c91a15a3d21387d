package hub

import (
	"context"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/protocol"
)

// The session message queue (issue 12) reaches watchers like the
// interaction tree does: a committed queue fact (host.FactQueueChanged)
// marks the session topic, which rereads the queue once and emits one
// complete `queue` event when it changed (latest wins per session, so a
// slow watcher skips stale queues). The session snapshot carries it.

// QueueReader (Config.Queues) reads a session's queue (*host.Host does).
type QueueReader interface {
	Queue(ctx context.Context, ws, sessionID string) (host.Queue, error)
}

func dirtyQueue() dirtyMark { return dirtyMark{queue: true} }

// readQueue reads the session's queue; ok is false when the reader keeps
// none.
func (t *topic) readQueue(ctx context.Context) (protocol.QueueState, bool, error) {
	qr := t.h.cfg.Queues
	if qr == nil {
		return protocol.QueueState{}, false, nil
	}
	q, err := qr.Queue(ctx, t.ws, t.sid)
	switch host.CodeOf(err) {
	case "":
	case host.CodeNotFound:
		return protocol.QueueState{SessionID: t.sid, Entries: []protocol.QueueEntry{}}, true, nil
	default:
		return protocol.QueueState{}, false, err
	}
	return protocol.QueueState{SessionID: t.sid, Revision: q.Revision, FenceTurnID: q.FenceTurnID, Entries: nonNil(protocol.FromQueueEntries(q.Entries)), Steering: q.Steering}, true, nil
}

// refreshQueue rereads the queue and emits it when its revision moved.
// Caller holds sideMu.
func (t *topic) refreshQueue(ctx context.Context) error {
	q, ok, err := t.readQueue(ctx)
	if err != nil || !ok {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if old := t.sv.queue; old != nil && old.Revision >= q.Revision {
		return nil // revisions only grow: this one is seen (or stale)
	}
	t.sv.queue = &q
	t.emit(protocol.KindQueue, "queue:"+t.sid, q)
	return nil
}
