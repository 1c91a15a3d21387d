package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// Contract for the interaction and runtime-operation ports
// (host/ports_interactions.go).

func interaction(ws, sessionID, turnID, requestID, root string, created int64) host.Interaction {
	return host.Interaction{
		WorkspaceID: ws, SessionID: sessionID, TurnID: turnID, RequestID: requestID, RootSessionID: root,
		Kind: host.InteractionApproval, Title: "Edit " + requestID, Prompt: "may I?",
		Options: []host.InteractionOption{{ID: "allow", Name: "Allow", Kind: "allow_once"}, {ID: "reject", Name: "Skip", Kind: "reject_once"}},
		Tool:    &host.ToolCall{ID: requestID, Title: "Edit", Kind: "edit", Status: "pending", Input: json.RawMessage(`{"path":"a.go"}`)},
		State:   host.InteractionPending, CreatedAt: at(created), UpdatedAt: at(created),
	}
}

func normInteraction(i host.Interaction) host.Interaction {
	i.CreatedAt, i.UpdatedAt, i.AnsweredAt = normTime(i.CreatedAt), normTime(i.UpdatedAt), normTimePtr(i.AnsweredAt)
	if i.Tool != nil {
		tool := *i.Tool
		tool.Input = normJSON(tool.Input)
		i.Tool = &tool
	}
	if i.Response != nil {
		r := *i.Response
		r.Payload = normJSON(r.Payload)
		i.Response = &r
	}
	return i
}

func operation(ref host.InteractionRef, next time.Time) host.RuntimeOperation {
	return host.RuntimeOperation{
		WorkspaceID: ref.WorkspaceID, ID: host.OperationIDFor(ref), Kind: host.OperationKindInteractionResponse,
		SessionID: ref.SessionID, TurnID: ref.TurnID, RequestID: ref.RequestID,
		Response:    host.InteractionResponse{OptionID: "allow", Payload: json.RawMessage(`{"message":"ok"}`)},
		RespondedBy: "u1", RespondedByName: "User One", State: host.OperationPrepared,
		NextAttemptAt: next, CreatedAt: at(1), UpdatedAt: at(1),
	}
}

func normOperation(op host.RuntimeOperation) host.RuntimeOperation {
	op.NextAttemptAt, op.LeaseExpiresAt = normTime(op.NextAttemptAt), normTimePtr(op.LeaseExpiresAt)
	op.CreatedAt, op.UpdatedAt = normTime(op.CreatedAt), normTime(op.UpdatedAt)
	op.Response.Payload = normJSON(op.Response.Payload)
	return op
}

func istore(t *testing.T, st host.Store) host.InteractionStore {
	t.Helper()
	return st
}

func itx(tx host.Tx) (host.InteractionTx, error) {
	return tx, nil
}

// iupdate runs fn with the interaction side of one transaction.
func iupdate(t *testing.T, st host.Store, fn func(ix host.InteractionTx) error) {
	t.Helper()
	update(t, st, func(tx host.Tx) error {
		ix, err := itx(tx)
		if err != nil {
			return err
		}
		return fn(ix)
	})
}

func testInteractionRoundTrip(t *testing.T, st host.Store) {
	is := istore(t, st)
	ws := uid("ws")
	s := session(ws, uid("s"), at(0))
	tu := turn(ws, s.ID, uid("t"), 1, host.PhaseDurablyAccepted)
	seed(t, st, []host.Session{s}, []host.Turn{tu}, nil, nil)
	b := interaction(ws, s.ID, tu.ID, "req-b", s.ID, 2)
	a := interaction(ws, s.ID, tu.ID, "req-a", s.ID, 3)
	a.Tool, a.Prompt = nil, ""
	iupdate(t, st, func(ix host.InteractionTx) error {
		if err := ix.InsertInteraction(ctx(t), b); err != nil {
			return err
		}
		return ix.InsertInteraction(ctx(t), a)
	})
	got, err := is.GetInteraction(ctx(t), b.Ref())
	noErr(t, "GetInteraction", err)
	same(t, "interaction", got, b, normInteraction)

	// Turn listing is by request id; the same request id in another turn
	// or workspace is another interaction.
	other := interaction(ws, s.ID, uid("t"), "req-a", s.ID, 4)
	elsewhere := interaction(uid("ws"), s.ID, tu.ID, "req-a", s.ID, 4)
	iupdate(t, st, func(ix host.InteractionTx) error {
		if err := ix.InsertInteraction(ctx(t), other); err != nil {
			return err
		}
		if err := ix.InsertInteraction(ctx(t), elsewhere); err != nil {
			return err
		}
		list, err := ix.TurnInteractions(ctx(t), ws, s.ID, tu.ID)
		if err != nil {
			return err
		}
		if len(list) != 2 || list[0].RequestID != "req-a" || list[1].RequestID != "req-b" {
			return fmt.Errorf("TurnInteractions = %+v", list)
		}
		same(t, "listed interaction", list[0], a, normInteraction)
		return nil
	})

	// The answered transition is a compare-and-set on the state.
	answered := b
	now := at(10)
	answered.State, answered.Response = host.InteractionAnswered, &host.InteractionResponse{OptionID: "reject", Payload: json.RawMessage(`{"message": "no"}`)}
	answered.AnsweredBy, answered.AnsweredByName, answered.AnsweredAt = "u1", "User One", &now
	answered.Resolution, answered.OperationID, answered.UpdatedAt = "", host.OperationIDFor(b.Ref()), at(10)
	iupdate(t, st, func(ix host.InteractionTx) error {
		if err := ix.UpdateInteraction(ctx(t), answered, host.InteractionPending); err != nil {
			return err
		}
		inTx, err := ix.Interaction(ctx(t), b.Ref())
		if err != nil {
			return err
		}
		same(t, "answered in tx", inTx, answered, normInteraction)
		return nil
	})
	err = st.Update(ctx(t), func(tx host.Tx) error {
		ix, err := itx(tx)
		if err != nil {
			return err
		}
		lost := answered
		lost.AnsweredBy = "u2"
		return ix.UpdateInteraction(ctx(t), lost, host.InteractionPending)
	})
	wantIs(t, "UpdateInteraction from a stale state", err, host.ErrConflict)
	got, err = is.GetInteraction(ctx(t), b.Ref())
	noErr(t, "GetInteraction after CAS", err)
	same(t, "interaction after a lost CAS", got, answered, normInteraction)

	// Immutable columns stay as inserted.
	changed := answered
	changed.Title, changed.Kind, changed.RootSessionID = "other", host.InteractionPlan, "elsewhere"
	changed.State, changed.Resolution = host.InteractionSuperseded, host.ResolutionProviderGone
	iupdate(t, st, func(ix host.InteractionTx) error {
		return ix.UpdateInteraction(ctx(t), changed, host.InteractionAnswered)
	})
	got, err = is.GetInteraction(ctx(t), b.Ref())
	noErr(t, "GetInteraction after update", err)
	want := answered
	want.State, want.Resolution = host.InteractionSuperseded, host.ResolutionProviderGone
	same(t, "immutable columns", got, want, normInteraction)

	err = st.Update(ctx(t), func(tx host.Tx) error {
		ix, err := itx(tx)
		if err != nil {
			return err
		}
		return ix.InsertInteraction(ctx(t), b)
	})
	wantIs(t, "InsertInteraction twice", err, host.ErrDuplicate)
	_, err = is.GetInteraction(ctx(t), host.InteractionRef{WorkspaceID: ws, SessionID: s.ID, TurnID: tu.ID, RequestID: "missing"})
	wantIs(t, "GetInteraction missing", err, host.ErrNotFound)
	err = st.Update(ctx(t), func(tx host.Tx) error {
		ix, err := itx(tx)
		if err != nil {
			return err
		}
		missing := b
		missing.RequestID = "missing"
		return ix.UpdateInteraction(ctx(t), missing, host.InteractionPending)
	})
	wantIs(t, "UpdateInteraction missing", err, host.ErrNotFound)
}

func testLatestTurn(t *testing.T, st host.Store) {
	ws := uid("ws")
	s, empty := session(ws, uid("s"), at(0)), session(ws, uid("s"), at(0))
	t1 := turn(ws, s.ID, uid("t"), 1, host.PhaseSettled)
	t2 := turn(ws, s.ID, uid("t"), 2, host.PhaseQueued)
	seed(t, st, []host.Session{s, empty}, []host.Turn{t2, t1}, nil, nil)
	iupdate(t, st, func(ix host.InteractionTx) error {
		got, err := ix.LatestTurn(ctx(t), ws, s.ID)
		if err != nil {
			return err
		}
		same(t, "latest turn", got, t2, normTurn)
		if _, err := ix.LatestTurn(ctx(t), ws, empty.ID); !errors.Is(err, host.ErrNotFound) {
			return fmt.Errorf("LatestTurn of a session without turns: %v", err)
		}
		if _, err := ix.LatestTurn(ctx(t), uid("ws"), s.ID); !errors.Is(err, host.ErrNotFound) {
			return fmt.Errorf("LatestTurn in another workspace: %v", err)
		}
		return nil
	})
}

func testInteractionTree(t *testing.T, st host.Store) {
	is := istore(t, st)
	ws := uid("ws")
	root := session(ws, "r-"+uid("s"), at(0))
	childA := session(ws, "a-"+uid("s"), at(1))
	childA.ParentID, childA.RootID = root.ID, root.ID
	grand := session(ws, "b-"+uid("s"), at(2)) // a child of childA: same root
	grand.ParentID, grand.RootID = childA.ID, root.ID
	deleted := session(ws, "c-"+uid("s"), at(3))
	deleted.ParentID, deleted.RootID, deleted.DeletedAt = root.ID, root.ID, tp(at(3))
	retracted := session(ws, "d-"+uid("s"), at(4))
	retracted.ParentID, retracted.RootID = root.ID, root.ID
	otherRoot := session(ws, "e-"+uid("s"), at(5))

	rt1 := turn(ws, root.ID, "rt1-"+uid("t"), 1, host.PhaseSettled)
	rt2 := turn(ws, root.ID, "rt2-"+uid("t"), 2, host.PhaseDurablyAccepted)
	at1 := turn(ws, childA.ID, "at1", 1, host.PhaseSettled)
	at2 := turn(ws, childA.ID, "at2", 2, host.PhaseDurablyAccepted)
	gt1 := turn(ws, grand.ID, "gt1", 1, host.PhaseDurablyAccepted)
	dt1 := turn(ws, deleted.ID, "dt1", 1, host.PhaseSettled)
	xt1 := turn(ws, retracted.ID, "xt1", 1, host.PhaseSettled)
	xt1.Retracted = true
	ot1 := turn(ws, otherRoot.ID, "ot1", 1, host.PhaseDurablyAccepted)
	seed(t, st, []host.Session{root, childA, grand, deleted, retracted, otherRoot},
		[]host.Turn{rt1, rt2, at1, at2, gt1, dt1, xt1, ot1}, nil, nil)

	old := interaction(ws, root.ID, rt1.ID, "old", root.ID, 1) // an older root turn: never in the tree
	r2 := interaction(ws, root.ID, rt2.ID, "r2", root.ID, 2)
	r1 := interaction(ws, root.ID, rt2.ID, "r1", root.ID, 3)
	aOld := interaction(ws, childA.ID, at1.ID, "a-old", root.ID, 4)
	a := interaction(ws, childA.ID, at2.ID, "a", root.ID, 5)
	g := interaction(ws, grand.ID, gt1.ID, "g", root.ID, 6)
	d := interaction(ws, deleted.ID, dt1.ID, "d", root.ID, 7)
	x := interaction(ws, retracted.ID, xt1.ID, "x", root.ID, 8)
	o := interaction(ws, otherRoot.ID, ot1.ID, "o", otherRoot.ID, 9)
	iupdate(t, st, func(ix host.InteractionTx) error {
		for _, i := range []host.Interaction{old, r2, r1, aOld, a, g, d, x, o} {
			if err := ix.InsertInteraction(ctx(t), i); err != nil {
				return err
			}
		}
		return nil
	})
	tree, err := is.InteractionTree(ctx(t), ws, root.ID)
	noErr(t, "InteractionTree", err)
	if tree.WorkspaceID != ws || tree.RootSessionID != root.ID || tree.RootTurnID != rt2.ID {
		t.Fatalf("tree identity: %+v", tree)
	}
	var keys []string
	for _, i := range tree.Interactions {
		keys = append(keys, i.SessionID+"/"+i.TurnID+"/"+i.RequestID)
	}
	want := []string{
		childA.ID + "/" + at2.ID + "/a",
		grand.ID + "/" + gt1.ID + "/g",
		root.ID + "/" + rt2.ID + "/r1",
		root.ID + "/" + rt2.ID + "/r2",
	}
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Fatalf("tree interactions = %v\nwant %v", keys, want)
	}
	for _, i := range tree.Interactions {
		if i.RequestID == "a" {
			same(t, "tree interaction", i, a, normInteraction)
		}
	}

	// A root without turns, a missing root, a deleted or provisional root.
	bare := session(ws, uid("s"), at(9))
	prov := session(ws, uid("s"), at(9))
	prov.Provisional = true
	gone := session(ws, uid("s"), at(9))
	gone.DeletedAt = tp(at(9))
	seed(t, st, []host.Session{bare, prov, gone}, nil, nil, nil)
	tree, err = is.InteractionTree(ctx(t), ws, bare.ID)
	noErr(t, "InteractionTree without turns", err)
	if tree.RootTurnID != "" || len(tree.Interactions) != 0 {
		t.Fatalf("tree without turns: %+v", tree)
	}
	for _, id := range []string{"missing", prov.ID, gone.ID} {
		_, err = is.InteractionTree(ctx(t), ws, id)
		wantIs(t, "InteractionTree of "+id, err, host.ErrNotFound)
	}
	_, err = is.InteractionTree(ctx(t), uid("ws"), root.ID)
	wantIs(t, "InteractionTree in another workspace", err, host.ErrNotFound)
}

func testRuntimeOperations(t *testing.T, st host.Store) {
	is := istore(t, st)
	ws := uid("ws")
	ref := host.InteractionRef{WorkspaceID: ws, SessionID: uid("s"), TurnID: uid("t"), RequestID: "r1"}
	op := operation(ref, at(5))
	iupdate(t, st, func(ix host.InteractionTx) error { return ix.InsertRuntimeOperation(ctx(t), op) })
	got, err := is.GetRuntimeOperation(ctx(t), ws, op.ID)
	noErr(t, "GetRuntimeOperation", err)
	same(t, "operation", got, op, normOperation)

	leased := op
	exp := at(100)
	leased.State, leased.Attempts, leased.LeaseReplica, leased.LeaseEpoch, leased.LeaseExpiresAt = host.OperationLeased, 1, "rep", "ep1", &exp
	leased.Result, leased.Reason, leased.LastError = host.DeliverySuperseded, host.ResolutionProviderGone, "boom"
	leased.FollowUp = &host.MessageContent{Text: "they declined", Quotes: []host.Quote{{Text: "q"}}}
	leased.FollowUpTurnID, leased.NextAttemptAt, leased.UpdatedAt = "t-follow", at(7), at(7)
	iupdate(t, st, func(ix host.InteractionTx) error {
		if err := ix.UpdateRuntimeOperation(ctx(t), leased); err != nil {
			return err
		}
		inTx, err := ix.RuntimeOperation(ctx(t), ws, op.ID)
		if err != nil {
			return err
		}
		same(t, "operation in tx", inTx, leased, normOperation)
		return nil
	})
	// Identity, response and responders are immutable.
	tampered := leased
	tampered.Response, tampered.RespondedBy, tampered.SessionID = host.InteractionResponse{OptionID: "x"}, "u9", "other"
	tampered.LeaseExpiresAt, tampered.FollowUp = nil, nil
	iupdate(t, st, func(ix host.InteractionTx) error { return ix.UpdateRuntimeOperation(ctx(t), tampered) })
	got, err = is.GetRuntimeOperation(ctx(t), ws, op.ID)
	noErr(t, "GetRuntimeOperation after update", err)
	wantOp := leased
	wantOp.LeaseExpiresAt, wantOp.FollowUp = nil, nil
	same(t, "immutable operation columns", got, wantOp, normOperation)

	err = st.Update(ctx(t), func(tx host.Tx) error {
		ix, err := itx(tx)
		if err != nil {
			return err
		}
		return ix.InsertRuntimeOperation(ctx(t), op)
	})
	wantIs(t, "InsertRuntimeOperation twice", err, host.ErrDuplicate)
	_, err = is.GetRuntimeOperation(ctx(t), ws, "iop_missing")
	wantIs(t, "GetRuntimeOperation missing", err, host.ErrNotFound)
	_, err = is.GetRuntimeOperation(ctx(t), uid("ws"), op.ID)
	wantIs(t, "GetRuntimeOperation in another workspace", err, host.ErrNotFound)
	err = st.Update(ctx(t), func(tx host.Tx) error {
		ix, err := itx(tx)
		if err != nil {
			return err
		}
		missing := op
		missing.ID = "iop_missing"
		return ix.UpdateRuntimeOperation(ctx(t), missing)
	})
	wantIs(t, "UpdateRuntimeOperation missing", err, host.ErrNotFound)
}

func testDueAndRequeue(t *testing.T, st host.Store) {
	is := istore(t, st)
	ws := uid("ws")
	now := time.Now().UTC().Truncate(time.Millisecond)
	mk := func(req string, state host.OperationState, next time.Time, replica string, exp *time.Time) host.RuntimeOperation {
		op := operation(host.InteractionRef{WorkspaceID: ws, SessionID: "s", TurnID: "t", RequestID: req}, next)
		op.State, op.LeaseReplica, op.LeaseExpiresAt = state, replica, exp
		if state == host.OperationLeased {
			op.LeaseEpoch = "ep-" + replica
		}
		return op
	}
	past, future := now.Add(-time.Minute), now.Add(time.Hour)
	due := mk("due", host.OperationPrepared, now.Add(-time.Second), "", nil)
	dueOlder := mk("due-older", host.OperationPrepared, now.Add(-2*time.Second), "", nil)
	later := mk("later", host.OperationPrepared, future, "", nil)
	expired := mk("expired", host.OperationLeased, past, "other", &past)
	live := mk("live", host.OperationLeased, past, "other", &future)
	mine := mk("mine", host.OperationLeased, past, "me", &future)
	done := mk("done", host.OperationCompleted, past, "", nil)
	failed := mk("failed", host.OperationFailed, past, "", nil)
	poisoned := mk("poisoned", host.OperationPrepared, past, "", nil)
	all := []host.RuntimeOperation{due, dueOlder, later, expired, live, mine, done, failed, poisoned}
	iupdate(t, st, func(ix host.InteractionTx) error {
		for _, op := range all {
			if err := ix.InsertRuntimeOperation(ctx(t), op); err != nil {
				return err
			}
		}
		return nil
	})
	noErr(t, "Quarantine", st.Quarantine(ctx(t), host.Quarantined{WorkspaceID: ws, Kind: host.QuarantineKindOperation,
		Key: ws + "/" + poisoned.ID, Reason: "test"}))
	scan := func(limit int) []string {
		t.Helper()
		ops, bad, err := is.DueRuntimeOperations(ctx(t), now, limit)
		noErr(t, "DueRuntimeOperations", err)
		for _, q := range bad {
			if q.WorkspaceID == ws {
				t.Fatalf("healthy operation reported undecodable: %+v", q)
			}
		}
		var ids []string
		for _, op := range ops {
			if op.WorkspaceID == ws {
				ids = append(ids, op.RequestID)
			}
		}
		return ids
	}
	if got := scan(1000); !slices.Equal(got, []string{"expired", "due-older", "due"}) {
		t.Fatalf("due operations = %v, want [expired due-older due] (oldest next attempt first)", got)
	}
	ops, _, err := is.DueRuntimeOperations(ctx(t), now, 1)
	noErr(t, "DueRuntimeOperations limit 1", err)
	if len(ops) != 1 {
		t.Fatalf("limit 1 returned %d", len(ops))
	}

	n, err := is.RequeueRuntimeOperations(ctx(t), "me", now)
	noErr(t, "RequeueRuntimeOperations", err)
	if n < 2 {
		t.Fatalf("requeued %d, want at least mine and expired", n)
	}
	for _, op := range []host.RuntimeOperation{mine, expired} {
		got, err := is.GetRuntimeOperation(ctx(t), ws, op.ID)
		noErr(t, "GetRuntimeOperation", err)
		if got.State != host.OperationPrepared || got.LeaseReplica != "" || got.LeaseEpoch != "" || got.LeaseExpiresAt != nil ||
			!normTime(got.NextAttemptAt).Equal(now) || got.Attempts != op.Attempts || !reflect.DeepEqual(normJSON(got.Response.Payload), normJSON(op.Response.Payload)) {
			t.Fatalf("requeued %s: %+v", op.RequestID, got)
		}
	}
	got, err := is.GetRuntimeOperation(ctx(t), ws, live.ID)
	noErr(t, "GetRuntimeOperation live", err)
	same(t, "another replica's live lease", got, live, normOperation)
	if got := scan(1000); !slices.Equal(got, []string{"due-older", "due", "expired", "mine"}) &&
		!slices.Equal(got, []string{"due-older", "due", "mine", "expired"}) {
		t.Fatalf("due after requeue = %v", got)
	}
}

func testDeleteProvisionalRemovesInteractions(t *testing.T, st host.Store) {
	is := istore(t, st)
	ws := uid("ws")
	prov := session(ws, uid("s"), at(0))
	prov.Provisional = true
	tu := turn(ws, prov.ID, uid("t"), 1, host.PhaseDurablyAccepted)
	seed(t, st, []host.Session{prov}, []host.Turn{tu}, nil, nil)
	i := interaction(ws, prov.ID, tu.ID, "r", prov.ID, 1)
	op := operation(i.Ref(), at(1))
	iupdate(t, st, func(ix host.InteractionTx) error {
		if err := ix.InsertInteraction(ctx(t), i); err != nil {
			return err
		}
		return ix.InsertRuntimeOperation(ctx(t), op)
	})
	update(t, st, func(tx host.Tx) error { return tx.DeleteProvisionalSession(ctx(t), ws, prov.ID) })
	_, err := is.GetInteraction(ctx(t), i.Ref())
	wantIs(t, "interaction of a deleted provisional session", err, host.ErrNotFound)
	_, err = is.GetRuntimeOperation(ctx(t), ws, op.ID)
	wantIs(t, "operation of a deleted provisional session", err, host.ErrNotFound)
}
