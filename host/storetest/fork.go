package storetest

import (
	"errors"
	"testing"

	"github.com/ensemble-dev/ensemble/host"
)

// Fork operations and lineage (host.ForkTx).

func testForkOps(t *testing.T, st host.Store) {
	ws, other := uid("ws"), uid("ws")
	src := session(ws, uid("s"), at(0))
	seed(t, st, []host.Session{src}, nil, nil, nil)
	op := host.ForkOp{WorkspaceID: ws, ClientSubmitID: "f-1", SourceSessionID: src.ID, SourceTurnID: "t-1",
		TargetSessionID: uid("s"), LineageID: src.ID, LineageSeq: 2, BaseTitle: "Ünïcode 😀", State: host.ForkDispatching,
		CreatedBy: "alice", CreatedAt: at(5), UpdatedAt: at(5)}
	update(t, st, func(tx host.Tx) error {
		f := tx
		if n, err := f.MaxLineageSeq(ctx(t), ws, src.ID); err != nil || n != 0 {
			t.Fatalf("empty lineage: %d %v", n, err)
		}
		return f.InsertForkOp(ctx(t), op)
	})
	// Duplicates: the same clientSubmitId, target, or (lineage, seq).
	for name, dup := range map[string]host.ForkOp{
		"clientSubmitId": {ClientSubmitID: "f-1", TargetSessionID: uid("s"), LineageSeq: 3},
		"target":         {ClientSubmitID: "f-2", TargetSessionID: op.TargetSessionID, LineageSeq: 3},
		"lineage seq":    {ClientSubmitID: "f-3", TargetSessionID: uid("s"), LineageSeq: 2},
	} {
		d := op
		d.ClientSubmitID, d.TargetSessionID, d.LineageSeq = dup.ClientSubmitID, dup.TargetSessionID, dup.LineageSeq
		err := st.Update(ctx(t), func(tx host.Tx) error { return tx.InsertForkOp(ctx(t), d) })
		wantIs(t, "duplicate "+name, err, host.ErrDuplicate)
	}
	update(t, st, func(tx host.Tx) error {
		f := tx
		got, err := f.ForkOp(ctx(t), ws, "f-1")
		noErr(t, "read fork op", err)
		if got != op {
			t.Fatalf("fork op round trip:\n got %+v\nwant %+v", got, op)
		}
		// Not committed yet: no lineage for the target.
		_, err = f.SessionLineage(ctx(t), ws, op.TargetSessionID)
		wantIs(t, "lineage of a dispatching fork", err, host.ErrNotFound)
		if n, err := f.MaxLineageSeq(ctx(t), ws, src.ID); err != nil || n != 2 {
			t.Fatalf("reserved seq: %d %v", n, err)
		}
		op.State, op.ProviderSessionID, op.UpdatedAt = host.ForkCommitted, "prov-1", at(9)
		return f.UpdateForkOp(ctx(t), op)
	})
	update(t, st, func(tx host.Tx) error {
		f := tx
		lin, err := f.SessionLineage(ctx(t), ws, op.TargetSessionID)
		noErr(t, "lineage", err)
		if lin != op {
			t.Fatalf("lineage:\n got %+v\nwant %+v", lin, op)
		}
		// Scoped by workspace.
		if _, err := f.ForkOp(ctx(t), other, "f-1"); !errors.Is(err, host.ErrNotFound) {
			t.Fatalf("fork op seen from another workspace: %v", err)
		}
		if _, err := f.SessionLineage(ctx(t), other, op.TargetSessionID); !errors.Is(err, host.ErrNotFound) {
			t.Fatalf("lineage seen from another workspace: %v", err)
		}
		if n, err := f.MaxLineageSeq(ctx(t), other, src.ID); err != nil || n != 0 {
			t.Fatalf("lineage seq from another workspace: %d %v", n, err)
		}
		missing := op
		missing.ClientSubmitID = "absent"
		wantIs(t, "update absent", f.UpdateForkOp(ctx(t), missing), host.ErrNotFound)
		return nil
	})
}
