package pg

import (
	"github.com/jackc/pgx/v5"

	"github.com/ensemble-dev/ensemble/host"
)

// queueAhead is what a Turn's settlement reads after the Turn's
// interactions (host.settleIn: endInteractions, then the queue handoff),
// read in the interactions' round trip: the Turn's queue entries and the
// session's queue. A settlement is 2 round trips shorter for it; ops is
// txConn.ops after that round trip, and the rows are current while it has
// not moved (nothing was queued or sent since).
type queueAhead struct {
	ws, session, turn string
	consumed          []host.QueueEntry
	queue             host.Queue
	ops               int
}

// readQueueAhead queues the reads of queueAhead for the next round trip,
// which the caller makes at once; the caller holds the session lock.
func (t *tx) readQueueAhead(ws, sessionID, turnID string) *queueAhead {
	a := &queueAhead{ws: ws, session: sessionID, turn: turnID}
	entries := func(into *[]host.QueueEntry) func(pgx.Rows) error {
		return func(rows pgx.Rows) error {
			e, err := scanQueueEntry(rows)
			if err != nil {
				return classify("list queue entries", err)
			}
			*into = append(*into, e)
			return nil
		}
	}
	t.tx.queue(deferred{op: "list queue entries",
		sql:  selectQueueEntries(turnEntriesWhere),
		args: []any{ws, sessionID, turnID}, scan: entries(&a.consumed)})
	t.tx.queue(deferred{op: "get queue", sql: selectQueueHead, args: []any{ws, sessionID},
		scan: func(rows pgx.Rows) error { return rows.Scan(&a.queue.Revision, &a.queue.FenceTurnID) }})
	t.tx.queue(deferred{op: "list queue entries",
		sql:  selectQueueEntries(waitingEntriesWhere),
		args: []any{ws, sessionID, string(host.QueueQueued)}, scan: entries(&a.queue.Entries)})
	return a
}

// current reports whether a still holds what a read of the session now
// would return.
func (a *queueAhead) current(t *tx, ws, sessionID string) bool {
	return a != nil && a.ws == ws && a.session == sessionID && a.ops == t.tx.ops
}
