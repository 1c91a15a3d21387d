package storetest

import (
	"slices"
	"testing"

	"github.com/ensemble-dev/ensemble/host"
)

// testStreamingVersions: a streaming message's version is the one its
// last append set, in every read, and message lists and Changes order
// and bound messages by it, whether the message streams or is closed
// (both stores keep a streaming message's version apart from the indexed
// one, migrations 00017).
func testStreamingVersions(t *testing.T, st host.Store) {
	ws := uid("ws")
	s := session(ws, uid("s"), at(0))
	seed(t, st, []host.Session{s}, nil, nil, nil)
	ver := int64(0)
	appendTo := func(id, turnID, text string, done bool) {
		t.Helper()
		ver++
		a := host.MessageAppend{WorkspaceID: ws, SessionID: s.ID, ID: id, TurnID: turnID,
			Role: host.RoleAgent, Kind: host.KindText, Version: ver, Text: text,
			TextLen: host.UTF16Len(text), Done: done, At: at(ver)}
		update(t, st, func(tx host.Tx) error { _, err := tx.AppendMessage(ctx(t), a); return err })
	}
	list := func(q host.MessageQuery) ([]string, []int64, bool) {
		t.Helper()
		page, err := st.ListMessages(ctx(t), ws, s.ID, q)
		noErr(t, "ListMessages", err)
		return messageIDs(page.Messages), messageVersions(page.Messages), page.HasMore
	}
	changes := func(q host.ChangesQuery) ([]int64, bool) {
		t.Helper()
		q.NoTurns = true
		c, err := st.Changes(ctx(t), ws, s.ID, q)
		noErr(t, "Changes", err)
		return messageVersions(c.Messages), c.MessagesHasMore
	}
	want := func(what string, got []int64, more bool, wantV []int64, wantMore bool) {
		t.Helper()
		if !slices.Equal(got, wantV) || more != wantMore {
			t.Fatalf("%s: versions %v hasMore=%v, want %v %v", what, got, more, wantV, wantMore)
		}
	}

	appendTo("a", "t1", "A", false)  // 1
	appendTo("b", "t1", "B", true)   // 2
	appendTo("c", "t2", "C", false)  // 3
	appendTo("a", "t1", " a", false) // 4
	appendTo("c", "t2", " c", false) // 5
	appendTo("d", "t2", "D", true)   // 6
	appendTo("a", "t1", " a", false) // 7

	ids, vs, more := list(host.MessageQuery{})
	if !slices.Equal(ids, []string{"b", "c", "d", "a"}) {
		t.Fatalf("messages in version order = %v (versions %v), want [b c d a]", ids, vs)
	}
	want("all", vs, more, []int64{2, 5, 6, 7}, false)
	_, vs, more = list(host.MessageQuery{AfterVersion: 4})
	want("after 4", vs, more, []int64{5, 6, 7}, false)
	_, vs, more = list(host.MessageQuery{AfterVersion: 2, Limit: 2})
	want("after 2, two", vs, more, []int64{5, 6}, true)
	_, vs, more = list(host.MessageQuery{BeforeVersion: 7, Limit: 2})
	want("before 7, two", vs, more, []int64{5, 6}, true)
	_, vs, more = list(host.MessageQuery{BeforeVersion: 6})
	want("before 6", vs, more, []int64{2, 5}, false)
	_, vs, more = list(host.MessageQuery{TurnID: "t1"})
	want("turn t1", vs, more, []int64{2, 7}, false)
	_, vs, more = list(host.MessageQuery{TurnID: "t2", AfterVersion: 5})
	want("turn t2 after 5", vs, more, []int64{6}, false)
	vs, more = changes(host.ChangesQuery{AfterVersion: 3})
	want("changes after 3", vs, more, []int64{5, 6, 7}, false)
	vs, more = changes(host.ChangesQuery{Messages: 2, Newest: true})
	want("newest two changes", vs, more, []int64{6, 7}, true)
	update(t, st, func(tx host.Tx) error {
		m, err := tx.Message(ctx(t), ws, s.ID, "a")
		if err != nil {
			return err
		}
		if m.Version != 7 || m.Content.Text != "A a a" || !m.Streaming {
			t.Fatalf("Tx.Message(a) = version %d %q streaming %v, want 7 %q true", m.Version, m.Content.Text, m.Streaming, "A a a")
		}
		return nil
	})

	appendTo("a", "t1", ".", true) // 8: closing moves the final version to the row
	appendTo("c", "t2", "", true)  // 9
	vs, more = changes(host.ChangesQuery{AfterVersion: 6})
	want("changes after the closes", vs, more, []int64{8, 9}, false)
	_, vs, more = list(host.MessageQuery{AfterVersion: 5})
	want("after 5, all closed", vs, more, []int64{6, 8, 9}, false)

	// A rewrite of a closed message that reopens it, then an append: the
	// rewrite's version, then the append's.
	var d host.Message
	update(t, st, func(tx host.Tx) (err error) { d, err = tx.Message(ctx(t), ws, s.ID, "d"); return err })
	ver++
	d.Version, d.Streaming, d.Content.Text = ver, true, "D again" // 10
	update(t, st, func(tx host.Tx) error { return tx.PutMessage(ctx(t), d) })
	vs, more = changes(host.ChangesQuery{AfterVersion: 9})
	want("changes after the rewrite", vs, more, []int64{10}, false)
	appendTo("d", "t2", "!", false) // 11
	ids, vs, more = list(host.MessageQuery{AfterVersion: 8})
	if !slices.Equal(ids, []string{"c", "d"}) {
		t.Fatalf("after 8 = %v, want [c d]", ids)
	}
	want("after the rewrite's append", vs, more, []int64{9, 11}, false)
}

func messageIDs(ms []host.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}
