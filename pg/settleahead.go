package pg

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/ensemble-dev/ensemble/host"
)

// queueAhead is what a Turn's settlement reads after the Turn's
// interactions (host.settleIn: endInteractions, then the queue handoff),
// known when the interactions are read: the Turn's queue entries and the
// session's queue. A settlement is 2 round trips shorter for it; ops is
// txConn.ops after that round trip, and the rows are current while it has
// not moved (nothing was queued or sent since). When the settlement probe
// found no entry, the entries are known empty without reading them.
type queueAhead struct {
	ws, session, turn string
	consumed          []host.QueueEntry
	queue             host.Queue
	ops               int
}

// settleReads is what one statement tells of the rows a settlement reads:
// whether the Turn has interactions, whether the Turn took up queue
// entries or any are waiting, and the session's queue head. A plain
// prompt's settlement has none of them, and reads nothing more.
type settleReads struct {
	interactions, queued bool
	revision             int64
	fence                string
}

const probeSettleSQL = `SELECT
	EXISTS (SELECT 1 FROM interactions WHERE workspace_id = $1 AND session_id = $2 AND turn_id = $3),
	EXISTS (SELECT 1 FROM queue_entries WHERE workspace_id = $1 AND session_id = $2 AND turn_id = $3)
		OR EXISTS (SELECT 1 FROM queue_entries WHERE workspace_id = $1 AND session_id = $2 AND state = $4),
	COALESCE(q.revision, 0), COALESCE(q.fence_turn_id, '')
	FROM (SELECT 1) one LEFT JOIN session_queues q ON q.workspace_id = $1 AND q.session_id = $2`

// probeAhead is the settlement probe sent ahead of the settlement
// (tx.SettleAhead): with the statement that needed a round trip next, the
// message append of an acceptance or a final output commit, so that the
// settlement's own reads cost none. touches is txConn.settleTouches right
// after it was queued: the rows it read are current while no statement
// naming their tables was queued or sent since, because this transaction
// holds the session's lock and every writer of them takes it.
type probeAhead struct {
	ws, session, turn string
	reads             settleReads
	read              bool // its row was scanned
	touches           int
}

// SettleAhead queues the settlement probe of turnID for the next round
// trip, or, before this transaction holds the session's lock, right after
// the lock statement once that is queued (lockSession): a sink's fenced
// load then carries it, and the settlement reads nothing of its own.
func (t *tx) SettleAhead(_ context.Context, ws, sessionID, turnID string) {
	if t.failed != nil {
		return
	}
	if !t.locked[sessionKey{ws, sessionID}] {
		t.probeWanted = &probeAhead{ws: ws, session: sessionID, turn: turnID}
		return
	}
	t.queueProbe(ws, sessionID, turnID)
}

// probeAfterLock queues the wanted probe of the session whose lock
// statement was just queued.
func (t *tx) probeAfterLock(k sessionKey) {
	if w := t.probeWanted; w != nil && w.ws == k.ws && w.session == k.id {
		t.probeWanted = nil
		t.queueProbe(w.ws, w.session, w.turn)
	}
}

func (t *tx) queueProbe(ws, sessionID, turnID string) {
	p := &probeAhead{ws: ws, session: sessionID, turn: turnID}
	t.tx.queue(deferred{op: "probe settlement reads", sql: probeSettleSQL,
		args: []any{ws, sessionID, turnID, string(host.QueueQueued)},
		scan: func(rows pgx.Rows) error {
			p.read = true
			return rows.Scan(&p.reads.interactions, &p.reads.queued, &p.reads.revision, &p.reads.fence)
		}})
	p.touches = t.tx.settleTouches
	t.probeAhead = p
}

// settleProbe is the settlement probe of turnID: the one sent ahead when
// it is current (sent with the next round trip if it is still queued), or
// a new one.
func (t *tx) settleProbe(ctx context.Context, ws, sessionID, turnID string) (settleReads, error) {
	p := t.probeAhead
	t.probeAhead = nil
	if p == nil || p.ws != ws || p.session != sessionID || p.turn != turnID || p.touches != t.tx.settleTouches {
		return t.probeSettle(ctx, ws, sessionID, turnID)
	}
	if !p.read {
		if err := t.tx.flush(ctx, "probe settlement reads"); err != nil {
			return settleReads{}, err
		}
	}
	return p.reads, nil
}

func (t *tx) probeSettle(ctx context.Context, ws, sessionID, turnID string) (settleReads, error) {
	var p settleReads
	err := t.tx.QueryRow(ctx, probeSettleSQL, ws, sessionID, turnID, string(host.QueueQueued)).
		Scan(&p.interactions, &p.queued, &p.revision, &p.fence)
	if err != nil {
		return p, classify("probe settlement reads", err)
	}
	return p, nil
}

// readEntriesAhead queues the reads of a's queue entries for the next
// round trip, which the caller makes at once; the caller holds the session
// lock, and a's queue head is the probe's.
func (t *tx) readEntriesAhead(a *queueAhead) {
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
		args: []any{a.ws, a.session, a.turn}, scan: entries(&a.consumed)})
	t.tx.queue(deferred{op: "list queue entries",
		sql:  selectQueueEntries(waitingEntriesWhere),
		args: []any{a.ws, a.session, string(host.QueueQueued)}, scan: entries(&a.queue.Entries)})
}

// current reports whether a still holds what a read of the session now
// would return.
func (a *queueAhead) current(t *tx, ws, sessionID string) bool {
	return a != nil && a.ws == ws && a.session == sessionID && a.ops == t.tx.ops
}
