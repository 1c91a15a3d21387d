package pg

import (
	"testing"

	"github.com/ensemble-dev/ensemble/host"
)

// TestStreamedAppendsAreHOT: an append that keeps a message streaming
// changes no indexed column of its row (the version goes to
// stream_version, migration 00017), so PostgreSQL updates it in place on
// its page (a HOT update) and inserts no index entry for it. The counts
// are this transaction's own (pg_stat_get_xact_*), so no other activity
// on the server moves them.
func TestStreamedAppendsAreHOT(t *testing.T) {
	f := newDeferredFixture(t)
	ctx := t.Context()
	const appends = 20
	err := f.st.Update(ctx, func(htx host.Tx) error {
		for v := int64(1); v <= appends+1; v++ {
			text := "piece "
			a := host.MessageAppend{WorkspaceID: f.ws, SessionID: f.sid, ID: "m-1", TurnID: f.queued.ID,
				Role: host.RoleAgent, Kind: host.KindText, Version: 10 + v, Text: text,
				TextLen: host.UTF16Len(text), At: f.bound.CreatedAt}
			if _, err := htx.AppendMessage(ctx, a); err != nil {
				return err
			}
		}
		var upd, hot int64
		err := htx.(*tx).tx.QueryRow(ctx, `SELECT pg_stat_get_xact_tuples_updated('messages'::regclass),
			pg_stat_get_xact_tuples_hot_updated('messages'::regclass)`).Scan(&upd, &hot)
		if err != nil {
			return err
		}
		if upd != appends || hot != appends {
			t.Errorf("%d appends to a streaming message: %d row updates, %d of them HOT; want %d and %d",
				appends, upd, hot, appends, appends)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
