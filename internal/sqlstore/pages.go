package sqlstore

import (
	"slices"

	"github.com/ensemble-dev/ensemble/host"
)

// Every listing reads limit+1 rows; the extra one only says there is more.
// The page builders below are that policy, once for both stores.

// TurnPage is a session's turns read newest first by seq.
func TurnPage(turns []host.Turn, limit int) host.TurnPage {
	page := host.TurnPage{}
	page.Turns, page.HasMore = Page(turns, limit)
	if page.HasMore {
		page.NextCursor = page.Turns[limit-1].Seq
	}
	return page
}

// MessagePage is messages read by version, descending when backward (the
// page before a version), and returned oldest first either way.
func MessagePage(msgs []host.Message, limit int, backward bool) host.MessagePage {
	page := host.MessagePage{}
	page.Messages, page.HasMore = Page(msgs, limit)
	if backward {
		slices.Reverse(page.Messages)
	}
	return page
}

// SessionPage is sessions read newest first by (created_at, id); at is the
// store's cursor time unit for a session's creation.
func SessionPage(sessions []host.Session, limit int, at func(host.Session) int64) host.SessionPage {
	page := host.SessionPage{}
	var more bool
	if page.Sessions, more = Page(sessions, limit); more {
		last := page.Sessions[limit-1]
		page.NextCursor = EncodeCursor(at(last), last.ID)
	}
	return page
}

// DeletedPage is topmost tombstones read newest first by (deleted_at, id);
// at is the store's cursor time unit for a deletion.
func DeletedPage(trees []host.TreeSession, limit int, at func(host.Tombstone) int64) host.DeletedPage {
	page := host.DeletedPage{Sessions: make([]host.DeletedSession, 0, len(trees))}
	trees, more := Page(trees, limit)
	for _, ts := range trees {
		page.Sessions = append(page.Sessions, host.DeletedSession{Session: ts.Session, Tombstone: *ts.Tombstone})
	}
	if more {
		last := page.Sessions[limit-1]
		page.NextCursor = EncodeCursor(at(last.Tombstone), last.Session.ID)
	}
	return page
}
