package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"

	"github.com/ensemble-dev/ensemble/host"
)

// Queue contract (host/ports_queue.go).

func queueEntry(ws, sessionID, id, submitID string, d host.Disposition) host.QueueEntry {
	c := host.MessageContent{Text: "queued " + id, Attachments: nil}
	return host.QueueEntry{
		WorkspaceID: ws, SessionID: sessionID, ID: id, Disposition: d, State: host.QueueQueued,
		ClientSubmitID: submitID, Author: "alice", AuthorName: "Alice", Content: c, Digest: c.Digest(),
		TargetTurnID: "t-run", CreatedAt: at(5), UpdatedAt: at(5),
	}
}

func insertEntry(t *testing.T, st host.Store, e host.QueueEntry) host.QueueEntry {
	t.Helper()
	var out host.QueueEntry
	update(t, st, func(tx host.Tx) (err error) {
		out, err = tx.InsertQueueEntry(ctx(t), e)
		return err
	})
	return out
}

// testQueueRoundTrip: entries round-trip, positions and revisions are
// assigned by the store, only queued entries are listed, in order.
func testQueueRoundTrip(t *testing.T, st host.Store) {
	ws := uid("ws")
	s := session(ws, uid("s"), at(0))
	seed(t, st, []host.Session{s}, nil, nil, nil)
	if q, err := st.GetQueue(ctx(t), ws, s.ID); err != nil || q.Revision != 0 || len(q.Entries) != 0 {
		t.Fatalf("empty queue: %+v %v", q, err)
	}
	a := insertEntry(t, st, queueEntry(ws, s.ID, "e1", "c1", host.DispositionSteering))
	b := insertEntry(t, st, queueEntry(ws, s.ID, "e2", "c2", host.DispositionFollowup))
	if a.Position != 1 || b.Position != 2 || a.Revision != 1 || a.AdmittedRevision != 1 || b.Revision != 2 {
		t.Fatalf("positions/revisions: a=%d/%d/%d b=%d/%d", a.Position, a.Revision, a.AdmittedRevision, b.Position, b.Revision)
	}
	got, err := st.GetQueueEntry(ctx(t), ws, s.ID, "e1")
	if err != nil || !reflect.DeepEqual(got, a) {
		t.Fatalf("GetQueueEntry = %+v %v, want %+v", got, err, a)
	}
	got, err = st.GetQueueEntryBySubmit(ctx(t), ws, "c2")
	if err != nil || !reflect.DeepEqual(got, b) {
		t.Fatalf("GetQueueEntryBySubmit = %+v %v, want %+v", got, err, b)
	}
	// Moving e1 past the pull cut drops it from the waiting list and bumps
	// the revision; its admission revision stays.
	a.State, a.TurnID, a.UpdatedAt = host.QueuePulled, "t-run", at(9)
	update(t, st, func(tx host.Tx) (err error) {
		a, err = tx.UpdateQueueEntry(ctx(t), a)
		return err
	})
	if a.Revision != 3 || a.AdmittedRevision != 1 {
		t.Fatalf("after update: revision %d admitted %d", a.Revision, a.AdmittedRevision)
	}
	q, err := st.GetQueue(ctx(t), ws, s.ID)
	if err != nil || q.Revision != 3 || len(q.Entries) != 1 || q.Entries[0].ID != "e2" {
		t.Fatalf("queue after pull: %+v %v", q, err)
	}
	update(t, st, func(tx host.Tx) error {
		es, err := tx.TurnQueueEntries(ctx(t), ws, s.ID, "t-run")
		if err != nil || len(es) != 1 || !reflect.DeepEqual(es[0], a) {
			return fmt.Errorf("TurnQueueEntries = %+v %v", es, err)
		}
		rev, err := tx.SetQueueFence(ctx(t), ws, s.ID, "t-run")
		if err != nil || rev != 4 {
			return fmt.Errorf("SetQueueFence = %d %v", rev, err)
		}
		q, err := tx.Queue(ctx(t), ws, s.ID)
		if err != nil || q.Revision != 4 || q.FenceTurnID != "t-run" {
			return fmt.Errorf("Tx.Queue = %+v %v", q, err)
		}
		return nil
	})
	// Other workspaces see nothing.
	if _, err := st.GetQueueEntry(ctx(t), "other-"+ws, s.ID, "e1"); !errors.Is(err, host.ErrNotFound) {
		t.Fatalf("foreign workspace read: %v", err)
	}
	if q, err := st.GetQueue(ctx(t), "other-"+ws, s.ID); err != nil || q.Revision != 0 || len(q.Entries) != 0 {
		t.Fatalf("foreign workspace queue: %+v %v", q, err)
	}
}

// testQueueReadsAfterInteractions: a settlement reads the Turn's
// interactions, its queue entries and the session's queue in that order
// (a store may read the latter two ahead, with the first); each read
// returns the rows as the transaction's own writes left them.
func testQueueReadsAfterInteractions(t *testing.T, st host.Store) {
	ws := uid("ws")
	s := session(ws, uid("s"), at(0))
	seed(t, st, []host.Session{s}, nil, nil, nil)
	pulled := insertEntry(t, st, queueEntry(ws, s.ID, "e1", "c1", host.DispositionSteering))
	waiting := insertEntry(t, st, queueEntry(ws, s.ID, "e2", "c2", host.DispositionFollowup))
	pulled.State, pulled.TurnID, pulled.UpdatedAt = host.QueuePulled, "t-run", at(9)
	update(t, st, func(tx host.Tx) (err error) {
		pulled, err = tx.UpdateQueueEntry(ctx(t), pulled)
		return err
	})
	ids := func(es []host.QueueEntry) []string {
		out := []string{}
		for _, e := range es {
			out = append(out, e.ID+":"+string(e.State))
		}
		return out
	}
	update(t, st, func(tx host.Tx) error {
		if _, err := tx.TurnInteractions(ctx(t), ws, s.ID, "t-run"); err != nil {
			return err
		}
		es, err := tx.TurnQueueEntries(ctx(t), ws, s.ID, "t-run")
		if err != nil || !reflect.DeepEqual(es, []host.QueueEntry{pulled}) {
			return fmt.Errorf("TurnQueueEntries = %+v %v, want %+v", es, err, pulled)
		}
		q, err := tx.Queue(ctx(t), ws, s.ID)
		if err != nil || q.Revision != pulled.Revision || !reflect.DeepEqual(q.Entries, []host.QueueEntry{waiting}) {
			return fmt.Errorf("Queue = %+v %v, want revision %d and %+v", q, err, pulled.Revision, waiting)
		}
		// Writes after the first read: every later read sees them.
		if _, err := tx.TurnInteractions(ctx(t), ws, s.ID, "t-run"); err != nil {
			return err
		}
		pulled.State, pulled.UpdatedAt = host.QueueDone, at(10)
		if pulled, err = tx.UpdateQueueEntry(ctx(t), pulled); err != nil {
			return err
		}
		if es, err := tx.TurnQueueEntries(ctx(t), ws, s.ID, "t-run"); err != nil || !reflect.DeepEqual(ids(es), []string{"e1:done"}) {
			return fmt.Errorf("TurnQueueEntries after an update = %v %v", ids(es), err)
		}
		if _, err := tx.TurnInteractions(ctx(t), ws, s.ID, "t-run"); err != nil {
			return err
		}
		if _, err := tx.InsertQueueEntry(ctx(t), queueEntry(ws, s.ID, "e3", "c3", host.DispositionFollowup)); err != nil {
			return err
		}
		q, err = tx.Queue(ctx(t), ws, s.ID)
		if err != nil || !reflect.DeepEqual(ids(q.Entries), []string{"e2:queued", "e3:queued"}) || q.Revision != pulled.Revision+1 {
			return fmt.Errorf("Queue after an insert = %v revision %d %v, want e2, e3 at revision %d", ids(q.Entries), q.Revision, err, pulled.Revision+1)
		}
		return nil
	})
}

// testSettlementReadsWithoutEntries: the settlement's reads when the
// Turn took up no queue entry and none waits: the Turn's interactions are
// listed whether or not it has some, the queue has no entries and keeps
// the revision its last change gave it (0 before any). A store may tell
// these apart from a queue with entries in one read (pg: settleahead.go).
func testSettlementReadsWithoutEntries(t *testing.T, st host.Store) {
	ws := uid("ws")
	s := session(ws, uid("s"), at(0))
	tu := turn(ws, s.ID, uid("t"), 1, host.PhaseDurablyAccepted)
	seed(t, st, []host.Session{s}, []host.Turn{tu}, nil, nil)
	reads := func(turnID string, wantInteractions []string, wantRevision int64) {
		t.Helper()
		update(t, st, func(tx host.Tx) error {
			is, err := tx.TurnInteractions(ctx(t), ws, s.ID, turnID)
			if err != nil {
				return err
			}
			got := []string{}
			for _, i := range is {
				got = append(got, i.RequestID)
			}
			if !reflect.DeepEqual(got, wantInteractions) {
				return fmt.Errorf("TurnInteractions(%s) = %v, want %v", turnID, got, wantInteractions)
			}
			if es, err := tx.TurnQueueEntries(ctx(t), ws, s.ID, turnID); err != nil || len(es) != 0 {
				return fmt.Errorf("TurnQueueEntries(%s) = %+v %v, want none", turnID, es, err)
			}
			q, err := tx.Queue(ctx(t), ws, s.ID)
			if err != nil || len(q.Entries) != 0 || q.Revision != wantRevision || q.FenceTurnID != "" {
				return fmt.Errorf("Queue = %+v %v, want revision %d and no entries", q, err, wantRevision)
			}
			return nil
		})
	}
	reads(tu.ID, []string{}, 0)

	iupdate(t, st, func(ix host.InteractionTx) error {
		return ix.InsertInteraction(ctx(t), interaction(ws, s.ID, tu.ID, "req-1", s.ID, 2))
	})
	// An entry that was queued and then retracted moved the revision and
	// left nothing waiting.
	e := insertEntry(t, st, queueEntry(ws, s.ID, uid("e"), uid("c"), host.DispositionFollowup))
	e.State, e.UpdatedAt = host.QueueRetracted, at(9)
	update(t, st, func(tx host.Tx) (err error) {
		e, err = tx.UpdateQueueEntry(ctx(t), e)
		return err
	})
	reads(tu.ID, []string{"req-1"}, e.Revision)
	reads(uid("t"), []string{}, e.Revision)
}

// testQueueRevisionRollsBack: a mutation whose transaction fails leaves
// neither the entry nor the revision bump behind, and duplicate ids or
// clientSubmitIds are ErrDuplicate.
func testQueueRevisionRollsBack(t *testing.T, st host.Store) {
	ws := uid("ws")
	s := session(ws, uid("s"), at(0))
	seed(t, st, []host.Session{s}, nil, nil, nil)
	insertEntry(t, st, queueEntry(ws, s.ID, "e1", "c1", host.DispositionFollowup))
	boom := errors.New("boom")
	err := st.Update(ctx(t), func(tx host.Tx) error {
		if _, err := tx.InsertQueueEntry(ctx(t), queueEntry(ws, s.ID, "e2", "c2", host.DispositionFollowup)); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update = %v", err)
	}
	q, err := st.GetQueue(ctx(t), ws, s.ID)
	if err != nil || q.Revision != 1 || len(q.Entries) != 1 {
		t.Fatalf("after rollback: %+v %v", q, err)
	}
	for name, e := range map[string]host.QueueEntry{
		"same id":             queueEntry(ws, s.ID, "e1", "c9", host.DispositionFollowup),
		"same clientSubmitId": queueEntry(ws, s.ID, "e9", "c1", host.DispositionFollowup),
	} {
		err := st.Update(ctx(t), func(tx host.Tx) error {
			_, err := tx.InsertQueueEntry(ctx(t), e)
			return err
		})
		if !errors.Is(err, host.ErrDuplicate) {
			t.Fatalf("%s: %v, want ErrDuplicate", name, err)
		}
	}
	if q, _ := st.GetQueue(ctx(t), ws, s.ID); q.Revision != 1 {
		t.Fatalf("duplicates moved the revision to %d", q.Revision)
	}
	missing := queueEntry(ws, s.ID, "nope", "c-nope", host.DispositionFollowup)
	err = st.Update(ctx(t), func(tx host.Tx) error {
		_, err := tx.UpdateQueueEntry(ctx(t), missing)
		return err
	})
	if !errors.Is(err, host.ErrNotFound) {
		t.Fatalf("update missing entry: %v", err)
	}
	if q, _ := st.GetQueue(ctx(t), ws, s.ID); q.Revision != 1 {
		t.Fatalf("failed update moved the revision to %d", q.Revision)
	}
}

// testQueueConcurrentInserts: concurrent admissions on one session get
// distinct positions and revisions, none lost: after the session's read
// (as the Host admits) and with the insert alone, whose own lock may go
// with it in one round trip.
func testQueueConcurrentInserts(t *testing.T, st host.Store) {
	for _, readFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("session_read_first=%v", readFirst), func(t *testing.T) {
			queueConcurrentInserts(t, st, readFirst)
		})
	}
}

func queueConcurrentInserts(t *testing.T, st host.Store, readFirst bool) {
	ws := uid("ws")
	s := session(ws, uid("s"), at(0))
	seed(t, st, []host.Session{s}, nil, nil, nil)
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				errs[i] = st.Update(ctx(t), func(tx host.Tx) error {
					if readFirst {
						if _, err := tx.Session(ctx(t), ws, s.ID); err != nil {
							return err
						}
					}
					_, err := tx.InsertQueueEntry(ctx(t), queueEntry(ws, s.ID, fmt.Sprintf("e%d", i), fmt.Sprintf("c%d", i), host.DispositionFollowup))
					return err
				})
				if !errors.Is(errs[i], host.ErrUnavailable) {
					return
				}
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("insert %d: %v", i, err)
		}
	}
	q, err := st.GetQueue(ctx(t), ws, s.ID)
	if err != nil || q.Revision != n || len(q.Entries) != n {
		t.Fatalf("queue: revision %d, %d entries, %v", q.Revision, len(q.Entries), err)
	}
	seen := map[int64]bool{}
	for i, e := range q.Entries {
		if e.Position != int64(i+1) || seen[e.Revision] {
			t.Fatalf("entry %d: position %d revision %d", i, e.Position, e.Revision)
		}
		seen[e.Revision] = true
	}
}
