package conformance

import (
	"fmt"
	"testing"

	"github.com/ensemble-dev/ensemble/host"
)

var VersionedMessages = Scenario{"query/streamed_output_is_versioned_messages", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	first := f.waitSettled(f.mustSend(s.ID, "q-1", "/sim words=30"))
	second := f.waitSettled(f.mustSend(s.ID, "q-2", "/sim words=10 tool"))
	all := f.messages(s.ID, host.MessageQuery{})
	if len(all) < 4 {
		t.Fatalf("messages %d", len(all))
	}
	for i := 1; i < len(all); i++ {
		if all[i].Version <= all[i-1].Version {
			t.Fatalf("versions must ascend: %d then %d", all[i-1].Version, all[i].Version)
		}
	}
	for _, m := range all {
		if m.Streaming {
			t.Fatalf("message %s still streaming after its turn settled", m.ID)
		}
		if m.Ordinal > m.Version || m.Ordinal <= 0 {
			t.Fatalf("ordinal %d must be the creation version (<= version %d)", m.Ordinal, m.Version)
		}
	}
	if words := len(splitWords(agentTextOf(all, first.ID))); words < 30 {
		t.Fatalf("first answer has %d words, want >= 30", words)
	}
	// A version cursor returns exactly what changed after it.
	mid := all[len(all)/2].Version
	after := f.messages(s.ID, host.MessageQuery{AfterVersion: mid})
	for _, m := range after {
		if m.Version <= mid {
			t.Fatalf("afterVersion %d returned version %d", mid, m.Version)
		}
	}
	if len(after) != countAfter(all, mid) {
		t.Fatalf("afterVersion returned %d, want %d", len(after), countAfter(all, mid))
	}
	before := f.messages(s.ID, host.MessageQuery{BeforeVersion: mid, Limit: 1})
	if len(before) != 1 || before[0].Version >= mid {
		t.Fatalf("beforeVersion page: %+v", before)
	}
	for _, m := range f.messages(s.ID, host.MessageQuery{TurnID: second.ID}) {
		if m.TurnID != second.ID {
			t.Fatalf("turn filter returned a message of turn %s", m.TurnID)
		}
	}
	page, err := f.host.ListSessionMessages(ctx, ws, s.ID, host.MessageQuery{Limit: 2})
	if err != nil || len(page.Messages) != 2 || !page.HasMore {
		t.Fatalf("limit page: %d messages, hasMore %v, %v", len(page.Messages), page.HasMore, err)
	}
}}

func agentTextOf(ms []host.Message, turnID string) string {
	var out []host.Message
	for _, m := range ms {
		if m.TurnID == turnID {
			out = append(out, m)
		}
	}
	return agentText(out)
}

func splitWords(s string) []string {
	var words []string
	var cur []rune
	for _, r := range s + " " {
		if r == ' ' || r == '\n' || r == '\t' {
			if len(cur) > 0 {
				words = append(words, string(cur))
				cur = cur[:0]
			}
			continue
		}
		cur = append(cur, r)
	}
	return words
}

func countAfter(ms []host.Message, v int64) int {
	n := 0
	for _, m := range ms {
		if m.Version > v {
			n++
		}
	}
	return n
}

var TurnPaging = Scenario{"query/turns_newest_first_with_stable_cursor", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	var ids []string
	for i := 0; i < 5; i++ {
		ids = append(ids, f.waitSettled(f.mustSend(s.ID, fmt.Sprintf("p-%d", i), "/sim words=1")).ID)
	}
	p1, err := f.host.ListSessionTurns(ctx, ws, s.ID, host.TurnQuery{Limit: 2})
	if err != nil || len(p1.Turns) != 2 || !p1.HasMore || p1.Turns[0].ID != ids[4] || p1.Turns[1].ID != ids[3] {
		t.Fatalf("page 1: %+v %v", p1, err)
	}
	// New work arriving between pages does not shift the cursor.
	f.waitSettled(f.mustSend(s.ID, "p-5", "/sim words=1"))
	p2, _ := f.host.ListSessionTurns(ctx, ws, s.ID, host.TurnQuery{Before: p1.NextCursor, Limit: 2})
	if len(p2.Turns) != 2 || p2.Turns[0].ID != ids[2] || p2.Turns[1].ID != ids[1] || !p2.HasMore {
		t.Fatalf("page 2: %+v", p2)
	}
	p3, _ := f.host.ListSessionTurns(ctx, ws, s.ID, host.TurnQuery{Before: p2.NextCursor, Limit: 2})
	if len(p3.Turns) != 1 || p3.Turns[0].ID != ids[0] || p3.HasMore {
		t.Fatalf("page 3: %+v", p3)
	}
}}

var WorkspaceScoping = Scenario{"query/every_read_and_command_is_workspace_scoped", func(t *testing.T, d Driver) {
	f := newFixture(t, d)
	s := f.createEmpty()
	tr := f.waitSettled(f.mustSend(s.ID, "w-1", "/sim words=2"))
	const other = "ws-other"
	checks := map[string]error{}
	_, checks["get"] = f.host.GetSession(ctx, other, s.ID)
	_, checks["turn"] = f.host.GetTurn(ctx, other, s.ID, tr.ID)
	_, checks["turns"] = f.host.ListSessionTurns(ctx, other, s.ID, host.TurnQuery{})
	_, checks["messages"] = f.host.ListSessionMessages(ctx, other, s.ID, host.MessageQuery{})
	_, checks["send"] = f.host.SendInput(ctx, host.SendInput{WorkspaceID: other, SessionID: s.ID, ClientSubmitID: "w-2", Content: host.MessageContent{Text: "x"}})
	_, checks["cancel"] = f.host.CancelTurn(ctx, host.CancelInput{WorkspaceID: other, SessionID: s.ID, TurnID: tr.ID})
	title := "stolen"
	_, checks["update"] = f.host.UpdateSession(ctx, host.UpdateSessionInput{WorkspaceID: other, SessionID: s.ID, Title: &title})
	for name, err := range checks {
		if host.CodeOf(err) != host.CodeNotFound {
			t.Errorf("%s from another workspace: want not_found, got %v", name, err)
		}
	}
	if p, _ := f.host.ListSessions(ctx, other, host.SessionQuery{}); len(p.Sessions) != 0 {
		t.Fatalf("another workspace lists %d sessions", len(p.Sessions))
	}
	// The same clientSubmitId in another workspace is a different claim.
	o, err := f.host.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: other})
	if err != nil {
		t.Fatal(err)
	}
	r, err := f.host.SendInput(ctx, host.SendInput{WorkspaceID: other, SessionID: o.Session.ID, ClientSubmitID: "w-1", Content: host.MessageContent{Text: "/sim words=2"}})
	if err != nil || r.Replayed || r.Turn.ID == tr.ID {
		t.Fatalf("claims are per workspace: %+v %v", r, err)
	}
	if got, _ := f.host.GetSession(ctx, ws, s.ID); got.Title == title {
		t.Fatal("another workspace changed the title")
	}
}}
