package server

import (
	"encoding/json"
	"slices"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/protocol"
)

// TestCommittedDeltasMatchReread is the differential test end to end: the
// sim agent streams answers (thoughts, a tool call between text halves,
// long answers, quoted prompts with surrogate pairs) through the real Host,
// whose output transactions commit typed deltas to SQLite; the hub applies
// them and a watcher on a real WebSocket applies what it receives to its
// snapshot. Its messages, encoded, equal message.list's bytes.
func TestCommittedDeltasMatchReread(t *testing.T) {
	e := newEnv(t, envOpts{})
	a := e.dial(e.member, false)
	sess := createSession(t, a)
	var res positionResult
	a.must("subscribe", map[string]any{"workspace": testWS, "topic": "session", "sessionId": sess.ID}, &res)
	msgs := map[string]protocol.Message{}
	for _, m := range res.Snapshot.Messages {
		msgs[m.ID] = m
	}
	prompts := []string{
		"/sim think tool words=40\nplease look 👋 at 𝄞 this",
		"/sim words=120\nlong one",
		"/sim tool\nquote: “ünïcödé” 🎉🎉",
		"/sim think\nshort",
	}
	var last string
	for i, p := range prompts {
		var sr host.SendResult
		if code := e.httpDo("POST", "/v1/workspaces/"+testWS+"/sessions/"+sess.ID+"/messages", e.member,
			map[string]any{"clientSubmitId": "diff-" + string(rune('a'+i)), "content": map[string]any{"text": p}}, &sr); code != 200 {
			t.Fatalf("submit %d: %d", i, code)
		}
		e.waitSettled(sess.ID, sr.Turn.ID)
		last = sr.Turn.ID
	}
	canonical := func() string {
		p, err := e.host.ListSessionMessages(t.Context(), testWS, sess.ID, host.MessageQuery{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return encodeByVersion(protocol.FromMessages(p.Messages))
	}
	want := canonical()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := make([]protocol.Message, 0, len(msgs))
		for _, m := range msgs {
			got = append(got, m)
		}
		if encodeByVersion(got) == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("watcher's transcript differs from a reread (last turn %s)\n got %s\nwant %s", last, encodeByVersion(got), want)
		}
		f := a.nextEvent(10 * time.Second)
		switch f.Kind {
		case protocol.KindMessageUpdate:
			var p protocol.MessageUpdate
			mustJSON(t, f.Payload, &p)
			if old, ok := msgs[p.Message.ID]; !ok || old.Version < p.Message.Version {
				msgs[p.Message.ID] = p.Message
			}
		case protocol.KindMessageDelta:
			var p protocol.MessageDelta
			mustJSON(t, f.Payload, &p)
			m, ok := msgs[p.MessageID]
			if !ok {
				t.Fatalf("delta for unknown message %s", p.MessageID)
			}
			if m.Version >= p.Version {
				continue
			}
			u := utf16.Encode([]rune(m.Content.Text))
			if p.Offset != len(u) {
				t.Fatalf("delta for %s at %d, watcher holds %d units", p.MessageID, p.Offset, len(u))
			}
			m.Content.Text += p.Text
			m.Version, m.UpdatedAt = p.Version, p.UpdatedAt
			msgs[p.MessageID] = m
		}
	}
	if s := e.hub.Stats(); s.DeltasApplied == 0 {
		t.Fatalf("the hub applied no deltas: %+v", s)
	}
}

func encodeByVersion(ms []protocol.Message) string {
	ms = slices.Clone(ms)
	slices.SortFunc(ms, func(a, b protocol.Message) int { return int(a.Version - b.Version) })
	b, _ := json.Marshal(ms)
	return string(b)
}
