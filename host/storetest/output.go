package storetest

import (
	"testing"

	"github.com/ensemble-dev/ensemble/host"
)

// testAppendMessage: AppendMessage creates a message at its version (also
// its ordinal), then appends text in the store, keeping the UTF-16 length
// (offset) beside it, replacing the tool only when one is given and
// closing the message on Done. PutMessage and appends share the text.
func testAppendMessage(t *testing.T, st host.Store) {
	ws := uid("ws")
	s := session(ws, uid("s"), at(0))
	seed(t, st, []host.Session{s}, nil, nil, nil)
	a := host.MessageAppend{WorkspaceID: ws, SessionID: s.ID, ID: "t1.text-1", TurnID: "t1",
		Role: host.RoleAgent, Kind: host.KindThought, Version: 3, Text: "a😀", TextLen: 3, At: at(3)}
	var res host.AppendResult
	update(t, st, func(tx host.Tx) (err error) { res, err = tx.AppendMessage(ctx(t), a); return err })
	if !res.Created || res.Offset != 0 {
		t.Fatalf("first append = %+v, want created at offset 0", res)
	}
	tool := &host.ToolCall{ID: "c1", Status: "pending"}
	b := a
	b.Version, b.Text, b.TextLen, b.Tool, b.At = 5, "é𝄞", 3, tool, at(5)
	update(t, st, func(tx host.Tx) (err error) { res, err = tx.AppendMessage(ctx(t), b); return err })
	if res.Created || res.Offset != 3 {
		t.Fatalf("second append = %+v, want an append at UTF-16 offset 3", res)
	}
	c := b
	c.Version, c.Text, c.TextLen, c.Tool, c.Done, c.At = 6, "", 0, nil, true, at(6)
	update(t, st, func(tx host.Tx) (err error) { res, err = tx.AppendMessage(ctx(t), c); return err })
	if res.Offset != 6 {
		t.Fatalf("closing append = %+v, want offset 6", res)
	}
	want := host.Message{WorkspaceID: ws, SessionID: s.ID, ID: a.ID, TurnID: "t1", Role: host.RoleAgent,
		Kind: host.KindThought, Version: 6, Ordinal: 3, Content: host.MessageContent{Text: "a😀é𝄞"},
		Tool: tool, Streaming: false, CreatedAt: at(3), UpdatedAt: at(6)}
	page, err := st.ListMessages(ctx(t), ws, s.ID, host.MessageQuery{})
	noErr(t, "ListMessages", err)
	if len(page.Messages) != 1 {
		t.Fatalf("got %d messages, want 1", len(page.Messages))
	}
	same(t, "appended message", page.Messages[0], want, normMessage)

	// A rewrite by PutMessage keeps the length in step: the next append
	// starts where the rewritten text ends.
	put := want
	put.Content.Text, put.Version = "xy😀", 7
	update(t, st, func(tx host.Tx) error { return tx.PutMessage(ctx(t), put) })
	d := c
	d.Version, d.Text, d.TextLen, d.Done = 8, "z", 1, false
	update(t, st, func(tx host.Tx) (err error) { res, err = tx.AppendMessage(ctx(t), d); return err })
	if res.Offset != 4 {
		t.Fatalf("append after a rewrite = %+v, want offset 4", res)
	}

	// Scoped by workspace: the same ids elsewhere are another message.
	other := a
	other.WorkspaceID = uid("ws")
	seed(t, st, []host.Session{session(other.WorkspaceID, s.ID, at(0))}, nil, nil, nil)
	update(t, st, func(tx host.Tx) (err error) { res, err = tx.AppendMessage(ctx(t), other); return err })
	if !res.Created {
		t.Fatalf("append in another workspace = %+v, want a new message", res)
	}
}

// testAppliedSeq: a Turn's applied output sequence round-trips and only
// moves forward, so a write from a Turn read earlier cannot undo it.
func testAppliedSeq(t *testing.T, st host.Store) {
	ws := uid("ws")
	s := session(ws, uid("s"), at(0))
	tu := turn(ws, s.ID, uid("t"), 1, host.PhaseDurablyAccepted)
	seed(t, st, []host.Session{s}, []host.Turn{tu}, nil, nil)
	stale := tu
	tu.AppliedSeq = 7
	update(t, st, func(tx host.Tx) error { return tx.UpdateTurn(ctx(t), tu) })
	got, err := st.GetTurn(ctx(t), ws, s.ID, tu.ID)
	noErr(t, "GetTurn", err)
	if got.AppliedSeq != 7 {
		t.Fatalf("applied seq = %d, want 7", got.AppliedSeq)
	}
	stale.CancelRequested = true // AppliedSeq 0: read before the output
	update(t, st, func(tx host.Tx) error { return tx.UpdateTurn(ctx(t), stale) })
	update(t, st, func(tx host.Tx) error {
		got, err := tx.Turn(ctx(t), ws, s.ID, tu.ID)
		if err != nil {
			return err
		}
		if got.AppliedSeq != 7 || !got.CancelRequested {
			t.Fatalf("after a stale write: applied %d, cancel %v; want 7, true", got.AppliedSeq, got.CancelRequested)
		}
		return nil
	})
}
