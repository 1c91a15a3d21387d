package storetest

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// RunTombstones is the trash contract: tombstones, the trash listing,
// retention candidates and the hard purge.
func RunTombstones(t *testing.T, open func(t *testing.T) host.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, st host.Store)
	}{
		{"TombstoneKeepsEveryRow", testTombstoneKeepsRows},
		{"SessionTree", testSessionTree},
		{"ListDeletedTopmostPaging", testListDeleted},
		{"PurgeCandidates", testPurgeCandidates},
		{"PurgeSessionsRemovesGraph", testPurgeSessions},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := open(t)
			t.Cleanup(func() { st.Close() })
			tc.fn(t, st)
		})
	}
}

// tree seeds root → child → grandchild plus a sibling child, each with a
// turn and a message, and an interaction on the child.
func seedTree(t *testing.T, st host.Store, ws string) (root, child, grand, sib host.Session) {
	t.Helper()
	root = session(ws, uid("r"), at(0))
	child = session(ws, uid("c"), at(1))
	child.ParentID, child.RootID = root.ID, root.ID
	grand = session(ws, uid("g"), at(2))
	grand.ParentID, grand.RootID = child.ID, root.ID
	sib = session(ws, uid("b"), at(3))
	sib.ParentID, sib.RootID = root.ID, root.ID
	var turns []host.Turn
	var msgs []host.Message
	for _, s := range []host.Session{root, child, grand, sib} {
		tu := turn(ws, s.ID, "t-"+s.ID, 1, host.PhaseSettled)
		tu.Outcome = host.OutcomeCompleted
		turns = append(turns, tu)
		msgs = append(msgs, message(ws, s.ID, "m-"+s.ID, tu.ID, 1))
	}
	seed(t, st, []host.Session{root, child, grand, sib}, turns, msgs, []host.SubmitClaim{claim(ws, uid("cs"), root.ID)})
	i := interaction(ws, child.ID, "t-"+child.ID, "req", root.ID, 1)
	iupdate(t, st, func(ix host.InteractionTx) error { return ix.InsertInteraction(ctx(t), i) })
	return
}

func tomb(at time.Time, gen, root string) *host.Tombstone {
	return &host.Tombstone{DeletedAt: at, Generation: gen, ComponentRoot: root, DeletedBy: "alice", DeletedByName: "Alice", Restorable: true}
}

func testTombstoneKeepsRows(t *testing.T, st host.Store) {
	ws := uid("ws")
	root, child, _, _ := seedTree(t, st, ws)
	before := dumpSession(t, st, ws, child.ID)
	update(t, st, func(tx host.Tx) error {
		return tx.SetTombstone(ctx(t), ws, []string{child.ID}, tomb(at(50), "gen-1", child.ID))
	})
	got, err := st.GetSession(ctx(t), ws, child.ID)
	if err != nil || got.DeletedAt == nil || !got.DeletedAt.Equal(at(50)) {
		t.Fatalf("tombstoned session = %+v, %v; want deletedAt %v", got, err, at(50))
	}
	tree, err := st.SessionTree(ctx(t), ws, root.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, ts := range tree {
		if ts.Session.ID == child.ID {
			want := host.Tombstone{DeletedAt: at(50), Generation: "gen-1", ComponentRoot: child.ID, DeletedBy: "alice", DeletedByName: "Alice", Restorable: true}
			if ts.Tombstone == nil || !reflect.DeepEqual(normTomb(*ts.Tombstone), want) {
				t.Fatalf("tombstone = %+v, want %+v", ts.Tombstone, want)
			}
		}
	}
	update(t, st, func(tx host.Tx) error { return tx.SetTombstone(ctx(t), ws, []string{child.ID}, nil) })
	after := dumpSession(t, st, ws, child.ID)
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("tombstone and clear changed rows:\nbefore %+v\nafter  %+v", before, after)
	}
	err = st.Update(ctx(t), func(tx host.Tx) error {
		return tx.SetTombstone(ctx(t), ws, []string{"absent"}, tomb(at(1), "g", "absent"))
	})
	wantIs(t, "tombstone of an absent session", err, host.ErrNotFound)
	// Another workspace cannot reach the session.
	err = st.Update(ctx(t), func(tx host.Tx) error {
		return tx.SetTombstone(ctx(t), uid("other"), []string{child.ID}, tomb(at(1), "g", child.ID))
	})
	wantIs(t, "tombstone through another workspace", err, host.ErrNotFound)
}

func normTomb(tb host.Tombstone) host.Tombstone {
	tb.DeletedAt = normTime(tb.DeletedAt)
	return tb
}

// sessionDump is every stored row of one session, for lossless checks.
type sessionDump struct {
	Session      host.Session
	Turns        []host.Turn
	Messages     []host.Message
	Interactions []host.Interaction
}

func dumpSession(t *testing.T, st host.Store, ws, id string) sessionDump {
	t.Helper()
	s, err := st.GetSession(ctx(t), ws, id)
	if err != nil {
		t.Fatal(err)
	}
	tp, err := st.ListTurns(ctx(t), ws, id, host.TurnQuery{Limit: 200})
	if err != nil {
		t.Fatal(err)
	}
	mp, err := st.ListMessages(ctx(t), ws, id, host.MessageQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	is, err := istore(t, st).SessionInteractions(ctx(t), ws, id, 0, 1<<40)
	if err != nil {
		t.Fatal(err)
	}
	d := sessionDump{Session: normSession(s)}
	for _, tu := range tp.Turns {
		d.Turns = append(d.Turns, normTurn(tu))
	}
	for _, m := range mp.Messages {
		d.Messages = append(d.Messages, normMessage(m))
	}
	for _, i := range is {
		d.Interactions = append(d.Interactions, normInteraction(i))
	}
	return d
}

func testSessionTree(t *testing.T, st host.Store) {
	ws := uid("ws")
	root, child, grand, sib := seedTree(t, st, ws)
	other := session(ws, uid("o"), at(9))
	seed(t, st, []host.Session{other}, nil, nil, nil)
	want := []string{root.ID, child.ID, grand.ID, sib.ID}
	slices.Sort(want)
	check := func(tree []host.TreeSession, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, ts := range tree {
			ids = append(ids, ts.Session.ID)
		}
		if !slices.Equal(ids, want) {
			t.Fatalf("tree = %v, want %v (id order, no other tree)", ids, want)
		}
	}
	check(st.SessionTree(ctx(t), ws, root.ID))
	update(t, st, func(tx host.Tx) error {
		check(tx.SessionTree(ctx(t), ws, root.ID))
		return nil
	})
	tree, err := st.SessionTree(ctx(t), uid("other"), root.ID)
	if err != nil || len(tree) != 0 {
		t.Fatalf("tree through another workspace = %v, %v; want empty", tree, err)
	}
}

func testListDeleted(t *testing.T, st host.Store) {
	ws := uid("ws")
	root, child, grand, sib := seedTree(t, st, ws)
	var roots []host.Session
	for i := range 5 {
		s := session(ws, uid("x"), at(int64(10+i)))
		roots = append(roots, s)
	}
	legacy := session(ws, uid("legacy"), at(20))
	legacy.DeletedAt = tp(at(300)) // deleted before lossless tombstones
	seed(t, st, append(roots, legacy), nil, nil, nil)
	update(t, st, func(tx host.Tx) error {
		// child + grand: one component under a live root; sib separately.
		if err := tx.SetTombstone(ctx(t), ws, []string{child.ID, grand.ID}, tomb(at(100), "g-c", child.ID)); err != nil {
			return err
		}
		if err := tx.SetTombstone(ctx(t), ws, []string{sib.ID}, tomb(at(100), "g-s", sib.ID)); err != nil {
			return err
		}
		for i, s := range roots {
			if err := tx.SetTombstone(ctx(t), ws, []string{s.ID}, tomb(at(int64(200+i)), "g-"+s.ID, s.ID)); err != nil {
				return err
			}
		}
		return nil
	})
	_ = root
	// Newest first by (deletedAt, id); grand is not topmost (its parent is
	// deleted); the legacy tombstone is listed, not restorable.
	want := []string{legacy.ID}
	for i := len(roots) - 1; i >= 0; i-- {
		want = append(want, roots[i].ID)
	}
	pair := []string{child.ID, sib.ID}
	slices.Sort(pair)
	want = append(want, pair[1], pair[0])
	var got []string
	var legacyRestorable = true
	q := host.DeletedQuery{Limit: 3}
	for range 10 {
		p, err := st.ListDeleted(ctx(t), ws, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range p.Sessions {
			got = append(got, d.Session.ID)
			if d.Session.ID == legacy.ID {
				legacyRestorable = d.Tombstone.Restorable
			}
			if d.Session.DeletedAt == nil || !d.Session.DeletedAt.Equal(d.Tombstone.DeletedAt) {
				t.Fatalf("listed session %s deletedAt %v, tombstone %v", d.Session.ID, d.Session.DeletedAt, d.Tombstone.DeletedAt)
			}
		}
		if p.NextCursor == "" {
			break
		}
		q.Cursor = p.NextCursor
	}
	if !slices.Equal(got, want) {
		t.Fatalf("trash pages = %v, want %v", got, want)
	}
	if legacyRestorable {
		t.Fatal("a legacy tombstone is listed as restorable")
	}
	p, err := st.ListDeleted(ctx(t), uid("other"), host.DeletedQuery{})
	if err != nil || len(p.Sessions) != 0 {
		t.Fatalf("trash of another workspace = %v, %v", p.Sessions, err)
	}
	_, err = st.ListDeleted(ctx(t), ws, host.DeletedQuery{Cursor: "!!"})
	if host.CodeOf(err) != host.CodeInvalidInput {
		t.Fatalf("bad cursor: %v, want invalid_input", err)
	}
}

func testPurgeCandidates(t *testing.T, st host.Store) {
	ws := uid("ws")
	// Far in the future, so other subtests' tombstones sort before these.
	far := at(1 << 40)
	var ss []host.Session
	for i := range 4 {
		ss = append(ss, session(ws, uid("p"), at(int64(i))))
	}
	child := session(ws, uid("pc"), at(9))
	child.ParentID, child.RootID = ss[0].ID, ss[0].ID
	seed(t, st, append(ss, child), nil, nil, nil)
	update(t, st, func(tx host.Tx) error {
		for i, s := range ss {
			ids := []string{s.ID}
			if i == 0 {
				ids = append(ids, child.ID)
			}
			if err := tx.SetTombstone(ctx(t), ws, ids, tomb(far.Add(time.Duration(i)*time.Second), "g"+s.ID, s.ID)); err != nil {
				return err
			}
		}
		return nil
	})
	cutoff := far.Add(2 * time.Second) // ss[0..2] are old enough
	var got []string
	after := host.PurgeCandidate{}
	for range 10 {
		cs, err := st.PurgeCandidates(ctx(t), cutoff, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if c.WorkspaceID == ws {
				got = append(got, c.SessionID)
				if !c.DeletedAt.Equal(far.Add(time.Duration(slices.IndexFunc(ss, func(s host.Session) bool { return s.ID == c.SessionID })) * time.Second)) {
					t.Fatalf("candidate %s deletedAt %v is not its exact tombstone time", c.SessionID, c.DeletedAt)
				}
			}
		}
		if len(cs) < 2 {
			break
		}
		after = cs[len(cs)-1]
	}
	want := []string{ss[0].ID, ss[1].ID, ss[2].ID}
	if !slices.Equal(got, want) {
		t.Fatalf("candidates = %v, want %v (topmost only, oldest first, cutoff inclusive)", got, want)
	}
}

func testPurgeSessions(t *testing.T, st host.Store) {
	ws := uid("ws")
	root, child, grand, sib := seedTree(t, st, ws)
	keep := dumpSession(t, st, ws, sib.ID)
	// A goal and a queue hang on the child too: purge removes them with it.
	update(t, st, func(tx host.Tx) error {
		g := host.GoalState{WorkspaceID: ws, SessionID: child.ID, Revision: 1, Seq: 1, UpdatedAt: at(5),
			Goal: &host.Goal{GoalSpec: host.GoalSpec{Objective: "o"}, Status: host.GoalActive, Revision: 1,
				Generation: 1, OperationID: "gop-1", UpdatedAt: at(5)}}
		if err := tx.PutGoal(ctx(t), g); err != nil {
			return err
		}
		_, err := tx.SetQueueFence(ctx(t), ws, child.ID, "t-"+child.ID)
		return err
	})
	var counts host.PurgeCounts
	update(t, st, func(tx host.Tx) error {
		var err error
		counts, err = tx.PurgeSessions(ctx(t), ws, []string{child.ID, grand.ID})
		return err
	})
	want := host.PurgeCounts{Sessions: 2, Turns: 2, Messages: 2, Interactions: 1}
	if counts != want {
		t.Fatalf("purge counts = %+v, want %+v", counts, want)
	}
	_, err := st.GetGoal(ctx(t), ws, child.ID)
	wantIs(t, "purged session's goal", err, host.ErrNotFound)
	if q, err := st.GetQueue(ctx(t), ws, child.ID); err != nil || q.Revision != 0 {
		t.Fatalf("purged session's queue: revision %d, %v", q.Revision, err)
	}
	for _, id := range []string{child.ID, grand.ID} {
		_, err := st.GetSession(ctx(t), ws, id)
		wantIs(t, "purged session", err, host.ErrNotFound)
		_, err = st.GetTurn(ctx(t), ws, id, "t-"+id)
		wantIs(t, "turn of a purged session", err, host.ErrNotFound)
		mp, err := st.ListMessages(ctx(t), ws, id, host.MessageQuery{})
		if err != nil || len(mp.Messages) != 0 {
			t.Fatalf("messages of a purged session: %v, %v", mp.Messages, err)
		}
	}
	_, err = istore(t, st).GetInteraction(ctx(t), host.InteractionRef{WorkspaceID: ws, SessionID: child.ID, TurnID: "t-" + child.ID, RequestID: "req"})
	wantIs(t, "interaction of a purged session", err, host.ErrNotFound)
	if got := dumpSession(t, st, ws, sib.ID); !reflect.DeepEqual(got, keep) {
		t.Fatalf("purge changed a sibling:\n%+v\n%+v", keep, got)
	}
	if _, err := st.GetSession(ctx(t), ws, root.ID); err != nil {
		t.Fatalf("purge removed the root: %v", err)
	}
	// Another workspace's purge removes nothing.
	update(t, st, func(tx host.Tx) error {
		c, err := tx.PurgeSessions(ctx(t), uid("other"), []string{sib.ID})
		if err == nil && c != (host.PurgeCounts{}) {
			t.Errorf("purge through another workspace removed %+v", c)
		}
		return err
	})
}
