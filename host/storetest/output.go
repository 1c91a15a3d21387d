package storetest

import (
	"errors"
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

// testAppendKnownOffset: an append that states the offset it expects
// (OffsetKnown) applies when the message is exactly that long, and
// otherwise fails its transaction with ErrNotFound and writes nothing:
// not when the message is longer or shorter, nor when it is absent (which
// a plain append would create).
func testAppendKnownOffset(t *testing.T, st host.Store) {
	ws := uid("ws")
	s := session(ws, uid("s"), at(0))
	seed(t, st, []host.Session{s}, nil, nil, nil)
	a := host.MessageAppend{WorkspaceID: ws, SessionID: s.ID, ID: "t1.text-1", TurnID: "t1",
		Role: host.RoleAgent, Kind: host.KindText, Version: 1, Text: "a😀", TextLen: 3, At: at(1)}
	update(t, st, func(tx host.Tx) error { _, err := tx.AppendMessage(ctx(t), a); return err })

	var res host.AppendResult
	b := a
	b.Version, b.Text, b.TextLen, b.At, b.Offset, b.OffsetKnown = 2, "bc", 2, at(2), 3, true
	update(t, st, func(tx host.Tx) (err error) { res, err = tx.AppendMessage(ctx(t), b); return err })
	if res.Created || res.Offset != 3 {
		t.Fatalf("append at its known offset = %+v, want an append at offset 3", res)
	}

	refused := func(what string, m host.MessageAppend) {
		t.Helper()
		err := st.Update(ctx(t), func(tx host.Tx) error { _, err := tx.AppendMessage(ctx(t), m); return err })
		if !errors.Is(err, host.ErrNotFound) {
			t.Fatalf("%s: %v, want ErrNotFound", what, err)
		}
	}
	c := b
	c.Version, c.Text, c.TextLen, c.At = 3, "X", 1, at(3)
	for _, off := range []int{3, 6, 0} { // the length is 5
		c.Offset = off
		refused("append at a stale offset", c)
	}
	absent := c
	absent.ID, absent.Offset = "t1.text-2", 0
	refused("append at a known offset to an absent message", absent)

	closing := b
	closing.Version, closing.Text, closing.TextLen, closing.Done, closing.Offset, closing.At = 4, "d", 1, true, 5, at(4)
	update(t, st, func(tx host.Tx) (err error) { res, err = tx.AppendMessage(ctx(t), closing); return err })
	if res.Offset != 5 {
		t.Fatalf("closing append at its known offset = %+v, want offset 5", res)
	}
	page, err := st.ListMessages(ctx(t), ws, s.ID, host.MessageQuery{})
	noErr(t, "ListMessages", err)
	if len(page.Messages) != 1 || page.Messages[0].Content.Text != "a😀bcd" || page.Messages[0].Version != 4 || page.Messages[0].Streaming {
		t.Fatalf("messages after the refused appends = %+v, want one closed message \"a😀bcd\" at version 4", page.Messages)
	}

	// New: the caller vouches the message is absent. It is created with
	// its text; an existing message refuses the transaction.
	fresh := a
	fresh.ID, fresh.Version, fresh.Text, fresh.TextLen, fresh.At, fresh.New = "t1.text-3", 5, "new", 3, at(5), true
	update(t, st, func(tx host.Tx) (err error) { res, err = tx.AppendMessage(ctx(t), fresh); return err })
	if !res.Created || res.Offset != 0 {
		t.Fatalf("append of a new message = %+v, want it created at offset 0", res)
	}
	empty := fresh // a message without text yet: its length says nothing
	empty.ID, empty.Version, empty.Text, empty.TextLen, empty.New = "t1.tool-1", 6, "", 0, false
	update(t, st, func(tx host.Tx) error { _, err := tx.AppendMessage(ctx(t), empty); return err })
	for _, id := range []string{"t1.text-1", "t1.text-3", "t1.tool-1"} { // closed, streaming, empty
		again := fresh
		again.ID, again.Version, again.At = id, 7, at(7)
		refused("append of a new message that exists", again)
	}
	page, err = st.ListMessages(ctx(t), ws, s.ID, host.MessageQuery{})
	noErr(t, "ListMessages", err)
	if len(page.Messages) != 3 || page.Messages[0].Content.Text != "a😀bcd" || page.Messages[1].Content.Text != "new" ||
		page.Messages[1].Version != 5 || page.Messages[2].Content.Text != "" {
		t.Fatalf("messages after the refused new appends = %+v, want \"a😀bcd\", \"new\" at version 5 and an empty one", page.Messages)
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

// testAdvanceOutput: AdvanceTurn moves only the applied sequence (forward)
// and the update time; AdvanceSession only the message version and the
// update time; both report a missing row as not found.
func testAdvanceOutput(t *testing.T, st host.Store) {
	ws := uid("ws")
	s := session(ws, uid("s"), at(0))
	s.Title, s.MessageVersion, s.TurnCount = "kept", 4, 1
	tu := turn(ws, s.ID, uid("t"), 1, host.PhaseDurablyAccepted)
	tu.ProviderSessionID, tu.ProviderTurnID, tu.AppliedSeq = "p-s", "p-t", 2
	seed(t, st, []host.Session{s}, []host.Turn{tu}, nil, nil)

	update(t, st, func(tx host.Tx) error {
		if err := tx.AdvanceTurn(ctx(t), ws, s.ID, tu.ID, 9, at(9)); err != nil {
			return err
		}
		return tx.AdvanceSession(ctx(t), ws, s.ID, 7, at(9))
	})
	wantTurn := tu
	wantTurn.AppliedSeq, wantTurn.UpdatedAt = 9, at(9)
	gotTurn, err := st.GetTurn(ctx(t), ws, s.ID, tu.ID)
	noErr(t, "GetTurn", err)
	same(t, "advanced turn", gotTurn, wantTurn, normTurn)
	wantSession := s
	wantSession.MessageVersion, wantSession.UpdatedAt = 7, at(9)
	gotSession, err := st.GetSession(ctx(t), ws, s.ID)
	noErr(t, "GetSession", err)
	same(t, "advanced session", gotSession, wantSession, normSession)

	// A stale advance (a retry that lost the race) never moves the applied
	// sequence back.
	update(t, st, func(tx host.Tx) error { return tx.AdvanceTurn(ctx(t), ws, s.ID, tu.ID, 5, at(10)) })
	gotTurn, err = st.GetTurn(ctx(t), ws, s.ID, tu.ID)
	noErr(t, "GetTurn", err)
	if gotTurn.AppliedSeq != 9 {
		t.Fatalf("applied seq after a stale advance = %d, want 9", gotTurn.AppliedSeq)
	}

	// Scoped by workspace, and a missing row is not found.
	for name, fn := range map[string]func(tx host.Tx) error{
		"turn in another workspace":    func(tx host.Tx) error { return tx.AdvanceTurn(ctx(t), uid("ws"), s.ID, tu.ID, 10, at(10)) },
		"missing turn":                 func(tx host.Tx) error { return tx.AdvanceTurn(ctx(t), ws, s.ID, uid("t"), 10, at(10)) },
		"session in another workspace": func(tx host.Tx) error { return tx.AdvanceSession(ctx(t), uid("ws"), s.ID, 8, at(10)) },
		"missing session":              func(tx host.Tx) error { return tx.AdvanceSession(ctx(t), ws, uid("s"), 8, at(10)) },
	} {
		err := st.Update(ctx(t), fn)
		if !errors.Is(err, host.ErrNotFound) {
			t.Fatalf("advance of a %s: %v, want not found", name, err)
		}
	}
}

// testMessageParts: streaming appends are stored as pieces (insert-only) and
// folded when the message closes; every reader sees the exact text at every
// point: ListMessages, Changes and Tx.Message mid-stream (several messages
// interleaved, surrogate pairs), after the closing append, after an append
// to a closed message, and after a PutMessage rewrite of a streaming one.
func testMessageParts(t *testing.T, st host.Store) {
	ws := uid("ws")
	s := session(ws, uid("s"), at(0))
	seed(t, st, []host.Session{s}, nil, nil, nil)
	ids := []string{"t1.text-1", "t1.thought-1"}
	want := map[string]string{}
	ver := int64(0)
	appendTo := func(id, text string, done bool) host.AppendResult {
		t.Helper()
		ver++
		a := host.MessageAppend{WorkspaceID: ws, SessionID: s.ID, ID: id, TurnID: "t1",
			Role: host.RoleAgent, Kind: host.KindText, Version: ver, Text: text,
			TextLen: host.UTF16Len(text), Done: done, At: at(ver)}
		var res host.AppendResult
		update(t, st, func(tx host.Tx) (err error) { res, err = tx.AppendMessage(ctx(t), a); return err })
		if res.Offset != host.UTF16Len(want[id]) {
			t.Fatalf("append %d to %s: offset %d, want %d", ver, id, res.Offset, host.UTF16Len(want[id]))
		}
		want[id] += text
		return res
	}
	check := func(when string, streaming map[string]bool) {
		t.Helper()
		page, err := st.ListMessages(ctx(t), ws, s.ID, host.MessageQuery{})
		noErr(t, "ListMessages", err)
		c, err := st.Changes(ctx(t), ws, s.ID, host.ChangesQuery{Messages: 10, NoTurns: true})
		noErr(t, "Changes", err)
		if len(page.Messages) != len(want) || len(c.Messages) != len(want) {
			t.Fatalf("%s: %d listed, %d changed, want %d", when, len(page.Messages), len(c.Messages), len(want))
		}
		for i, m := range page.Messages {
			for _, got := range []host.Message{m, c.Messages[i]} {
				if got.Content.Text != want[got.ID] || got.Streaming != streaming[got.ID] {
					t.Fatalf("%s: %s = %q (streaming %v), want %q (streaming %v)", when, got.ID,
						got.Content.Text, got.Streaming, want[got.ID], streaming[got.ID])
				}
			}
		}
		update(t, st, func(tx host.Tx) error {
			for id := range want {
				m, err := tx.Message(ctx(t), ws, s.ID, id)
				if err != nil {
					return err
				}
				if m.Content.Text != want[id] {
					t.Fatalf("%s: Tx.Message %s = %q, want %q", when, id, m.Content.Text, want[id])
				}
			}
			return nil
		})
	}

	pieces := []string{"Hello", " wörld", " 😀", "", "𝄞x", " and", " more 🙂"}
	for i, p := range pieces {
		appendTo(ids[i%2], p, false)
	}
	for i := 0; i < 200; i++ { // many pieces: order is by offset, not by insertion luck
		appendTo(ids[0], string(rune('a'+i%26)), false)
	}
	check("mid-stream", map[string]bool{ids[0]: true, ids[1]: true})

	appendTo(ids[0], " end.", true)
	check("after close", map[string]bool{ids[0]: false, ids[1]: true})
	appendTo(ids[1], "", true) // an empty closing append folds too
	check("both closed", map[string]bool{ids[0]: false, ids[1]: false})

	// An append to a closed message still lands at its end, and the message
	// stays closed.
	appendTo(ids[0], " P.S. 😀", false)
	check("append after close", map[string]bool{ids[0]: false, ids[1]: false})

	// A PutMessage rewrite of a streaming message replaces every piece; the
	// next append continues from the rewritten text.
	id := "t1.text-2"
	appendTo(id, "first", false)
	appendTo(id, " second", false)
	var m host.Message
	update(t, st, func(tx host.Tx) (err error) { m, err = tx.Message(ctx(t), ws, s.ID, id); return err })
	ver++
	m.Content.Text, m.Version = "rewritten 😀", ver
	update(t, st, func(tx host.Tx) error { return tx.PutMessage(ctx(t), m) })
	want[id] = m.Content.Text
	appendTo(id, " then more", false)
	check("after a rewrite", map[string]bool{ids[0]: false, ids[1]: false, id: true})
	appendTo(id, "", true)
	check("rewrite closed", map[string]bool{ids[0]: false, ids[1]: false, id: false})
}
