// Package storetest is the contract every host.Store adapter must meet. An
// adapter's own test calls Run with a function that opens a migrated store;
// the suite depends only on package host so every adapter can share it.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// Run runs the contract. open is called once per subtest and returns a
// ready (migrated) store; Run closes it when the subtest ends, so Close must
// be safe to call twice if open also registers a cleanup. Every subtest uses
// fresh workspace ids, so a store shared between subtests works too.
func Run(t *testing.T, open func(t *testing.T) host.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, st host.Store)
	}{
		{"SessionRoundTrip", testSessionRoundTrip},
		{"TurnRoundTrip", testTurnRoundTrip},
		{"MessageRoundTrip", testMessageRoundTrip},
		{"ClaimRoundTrip", testClaimRoundTrip},
		{"TxSeesOwnWrites", testTxSeesOwnWrites},
		{"UpdateRollsBack", testUpdateRollsBack},
		{"NotFound", testNotFound},
		{"Duplicates", testDuplicates},
		{"WorkspaceScoping", testWorkspaceScoping},
		{"ListSessionsPaging", testListSessionsPaging},
		{"ListSessionsLimits", testListSessionsLimits},
		{"ListTurnsPaging", testListTurnsPaging},
		{"ListTurnsLimits", testListTurnsLimits},
		{"ListMessagesVersions", testListMessagesVersions},
		{"ListMessagesLimits", testListMessagesLimits},
		{"UnsettledAndQuarantine", testUnsettledAndQuarantine},
		{"Outbox", testOutbox},
		{"OutboxClaimsWholeRows", testOutboxClaimsWholeRows},
		{"DeleteProvisionalSession", testDeleteProvisionalSession},
		{"ConcurrentUpdateNoLostUpdate", testConcurrentUpdate},
		{"InteractionRoundTrip", testInteractionRoundTrip},
		{"LatestTurn", testLatestTurn},
		{"InteractionTree", testInteractionTree},
		{"RuntimeOperations", testRuntimeOperations},
		{"DueAndRequeueRuntimeOperations", testDueAndRequeue},
		{"DeleteProvisionalRemovesInteractions", testDeleteProvisionalRemovesInteractions},
		{"Changes", testChanges},
		{"AppendMessage", testAppendMessage},
		{"AppendKnownOffset", testAppendKnownOffset},
		{"AppliedSeq", testAppliedSeq},
		{"AdvanceOutput", testAdvanceOutput},
		{"MessageParts", testMessageParts},
		{"StreamingVersions", testStreamingVersions},
		{"ForkOps", testForkOps},
		{"Goals", testGoals},
		{"GoalSummaries", testGoalSummaries},
		{"QueueRoundTrip", testQueueRoundTrip},
		{"QueueRevisionRollsBack", testQueueRevisionRollsBack},
		{"QueueReadsAfterInteractions", testQueueReadsAfterInteractions},
		{"SettlementReadsWithoutEntries", testSettlementReadsWithoutEntries},
		{"QueueConcurrentInserts", testQueueConcurrentInserts},
		{"Closed", testClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := open(t)
			t.Cleanup(func() { st.Close() })
			tc.fn(t, st)
		})
	}
}

// ---- fixtures ----

// base is a fixed instant with millisecond precision, which every adapter
// must store exactly.
var base = time.UnixMilli(1_750_000_000_000).UTC()

func at(msOffset int64) time.Time { return base.Add(time.Duration(msOffset) * time.Millisecond) }

func tp(t time.Time) *time.Time { return &t }

func uid(prefix string) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return prefix + "-" + hex.EncodeToString(b)
}

func session(ws, id string, created time.Time) host.Session {
	return host.Session{
		WorkspaceID: ws, ID: id, RootID: id, Title: "title " + id, Agent: "sim",
		CreatedAt: created, UpdatedAt: created,
	}
}

func turn(ws, sessionID, id string, seq int64, phase host.TurnPhase) host.Turn {
	return host.Turn{
		WorkspaceID: ws, SessionID: sessionID, ID: id, Seq: seq, Origin: "user",
		Phase: phase, CreatedAt: at(seq), UpdatedAt: at(seq),
	}
}

func message(ws, sessionID, id, turnID string, version int64) host.Message {
	return host.Message{
		WorkspaceID: ws, SessionID: sessionID, ID: id, TurnID: turnID,
		Role: host.RoleAgent, Kind: host.KindText, Version: version, Ordinal: version,
		Content:   host.MessageContent{Text: "text " + id},
		CreatedAt: at(version), UpdatedAt: at(version),
	}
}

func claim(ws, clientSubmitID, sessionID string) host.SubmitClaim {
	c := host.MessageContent{Text: "hello " + clientSubmitID}
	return host.SubmitClaim{
		WorkspaceID: ws, ClientSubmitID: clientSubmitID, SessionID: sessionID,
		Digest: c.Digest(), Content: c, State: host.ClaimPrepared,
		CreatedAt: at(1), UpdatedAt: at(1),
	}
}

func ctx(t *testing.T) context.Context { return t.Context() }

// update runs fn in one transaction and fails the test on error.
func update(t *testing.T, st host.Store, fn func(tx host.Tx) error) {
	t.Helper()
	if err := st.Update(ctx(t), fn); err != nil {
		t.Fatalf("Update: %v", err)
	}
}

// seed inserts sessions, turns, messages and claims in one transaction.
func seed(t *testing.T, st host.Store, sessions []host.Session, turns []host.Turn, msgs []host.Message, claims []host.SubmitClaim) {
	t.Helper()
	update(t, st, func(tx host.Tx) error {
		c := ctx(t)
		for _, s := range sessions {
			if err := tx.InsertSession(c, s); err != nil {
				return fmt.Errorf("insert session %s: %w", s.ID, err)
			}
		}
		for _, tu := range turns {
			if err := tx.InsertTurn(c, tu); err != nil {
				return fmt.Errorf("insert turn %s: %w", tu.ID, err)
			}
		}
		for _, m := range msgs {
			if err := tx.PutMessage(c, m); err != nil {
				return fmt.Errorf("put message %s: %w", m.ID, err)
			}
		}
		for _, cl := range claims {
			if err := tx.InsertClaim(c, cl); err != nil {
				return fmt.Errorf("insert claim %s: %w", cl.ClientSubmitID, err)
			}
		}
		return nil
	})
}

// ---- comparison ----

func normTime(t time.Time) time.Time { return t.UTC().Round(0) }

func normTimePtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	n := normTime(*t)
	return &n
}

func normSession(s host.Session) host.Session {
	s.CreatedAt, s.UpdatedAt, s.DeletedAt = normTime(s.CreatedAt), normTime(s.UpdatedAt), normTimePtr(s.DeletedAt)
	if len(s.Settings) == 0 {
		s.Settings = nil
	}
	return s
}

func normTurn(tu host.Turn) host.Turn {
	tu.CreatedAt, tu.UpdatedAt, tu.SettledAt = normTime(tu.CreatedAt), normTime(tu.UpdatedAt), normTimePtr(tu.SettledAt)
	return tu
}

// normJSON compacts raw JSON so adapters that re-serialise it (jsonb)
// compare equal to what was written.
func normJSON(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return raw
	}
	b, _ := json.Marshal(v)
	return b
}

func normMessage(m host.Message) host.Message {
	m.CreatedAt, m.UpdatedAt = normTime(m.CreatedAt), normTime(m.UpdatedAt)
	if m.Tool != nil {
		tool := *m.Tool
		tool.Input = normJSON(tool.Input)
		m.Tool = &tool
	}
	return m
}

func normClaim(c host.SubmitClaim) host.SubmitClaim {
	c.CreatedAt, c.UpdatedAt = normTime(c.CreatedAt), normTime(c.UpdatedAt)
	return c
}

func same[T any](t *testing.T, what string, got, want T, norm func(T) T) {
	t.Helper()
	if g, w := norm(got), norm(want); !reflect.DeepEqual(g, w) {
		t.Fatalf("%s mismatch\n got: %+v\nwant: %+v", what, g, w)
	}
}

func wantIs(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want one wrapping %v", what, err, target)
	}
}

func noErr(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func sessionIDs(ss []host.Session) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.ID
	}
	return out
}

func turnSeqs(ts []host.Turn) []int64 {
	out := make([]int64, len(ts))
	for i, tu := range ts {
		out[i] = tu.Seq
	}
	return out
}

func messageVersions(ms []host.Message) []int64 {
	out := make([]int64, len(ms))
	for i, m := range ms {
		out[i] = m.Version
	}
	return out
}

// ---- round trips ----

func testSessionRoundTrip(t *testing.T, st host.Store) {
	ws := uid("ws")
	parent := session(ws, uid("s"), at(0))
	child := host.Session{
		WorkspaceID: ws, ID: uid("s"), ParentID: parent.ID, RootID: parent.ID,
		Title: "child", TitleExplicit: true, Agent: "claude", Simulated: true,
		Settings: map[string]string{"model": "opus", "mode": "plan"}, Pinned: true,
		ProviderSessionID: "prov-1", MessageVersion: 7, TurnCount: 3, ActiveTurnID: "t-3",
		CreatedBy: "user-1", CreatedAt: at(10), UpdatedAt: at(20),
	}
	seed(t, st, []host.Session{parent, child}, nil, nil, nil)

	got, err := st.GetSession(ctx(t), ws, child.ID)
	noErr(t, "GetSession", err)
	same(t, "session", got, child, normSession)
	if got.CreatedAt.Location() != time.UTC {
		t.Fatalf("CreatedAt location = %v, want UTC", got.CreatedAt.Location())
	}

	// Mutable fields change; an empty settings map reads back as nil.
	changed := child
	changed.Title, changed.TitleExplicit, changed.Pinned = "renamed", false, false
	changed.Settings = map[string]string{}
	changed.ProviderSessionID, changed.MessageVersion, changed.TurnCount = "prov-2", 9, 4
	changed.ActiveTurnID, changed.UpdatedAt, changed.DeletedAt = "", at(30), tp(at(31))
	update(t, st, func(tx host.Tx) error {
		inTx, err := tx.Session(ctx(t), ws, child.ID)
		if err != nil {
			return err
		}
		same(t, "session in tx", inTx, child, normSession)
		return tx.UpdateSession(ctx(t), changed)
	})
	got, err = st.GetSession(ctx(t), ws, child.ID)
	noErr(t, "GetSession after update", err)
	changed.Settings = nil
	same(t, "updated session", got, changed, normSession)

	// Restoring clears the tombstone.
	changed.DeletedAt = nil
	update(t, st, func(tx host.Tx) error { return tx.UpdateSession(ctx(t), changed) })
	got, err = st.GetSession(ctx(t), ws, child.ID)
	noErr(t, "GetSession after restore", err)
	if got.DeletedAt != nil {
		t.Fatalf("DeletedAt = %v after restore, want nil", got.DeletedAt)
	}
}

func testTurnRoundTrip(t *testing.T, st host.Store) {
	ws := uid("ws")
	s := session(ws, uid("s"), at(0))
	tu := host.Turn{
		WorkspaceID: ws, SessionID: s.ID, ID: uid("t"), Seq: 1, Origin: "user",
		Phase: host.PhaseQueued, ClientSubmitID: "csid-1", IdentityAnchorTurnID: "t-0",
		SubmittedBy: "user-1", CreatedAt: at(1), UpdatedAt: at(1),
		TurnLabels: host.TurnLabels{SubmittedByName: "Ünïcode Name", Agent: &host.AgentInfo{Name: "agent", Version: "1.2"}},
	}
	seed(t, st, []host.Session{s}, []host.Turn{tu}, nil, nil)
	got, err := st.GetTurn(ctx(t), ws, s.ID, tu.ID)
	noErr(t, "GetTurn", err)
	same(t, "turn", got, tu, normTurn)

	settled := tu
	settled.Phase, settled.Outcome, settled.FailureReason = host.PhaseSettled, host.OutcomeFailed, host.ReasonProviderError
	settled.StopReason, settled.ProviderSessionID, settled.ProviderTurnID = "end_turn", "ps-1", "pt-1"
	settled.Retracted, settled.CancelRequested = true, true
	settled.UpdatedAt, settled.SettledAt = at(5), tp(at(5))
	// Labels are mutable: who stopped it, and the agent that accepted it.
	settled.CanceledBy, settled.CanceledByName = "user-2", "Bob"
	settled.Agent = &host.AgentInfo{Name: "real-agent", Version: "2.0", Simulated: false}
	update(t, st, func(tx host.Tx) error {
		inTx, err := tx.Turn(ctx(t), ws, s.ID, tu.ID)
		if err != nil {
			return err
		}
		same(t, "turn in tx", inTx, tu, normTurn)
		return tx.UpdateTurn(ctx(t), settled)
	})
	got, err = st.GetTurn(ctx(t), ws, s.ID, tu.ID)
	noErr(t, "GetTurn after update", err)
	same(t, "settled turn", got, settled, normTurn)
}

func testMessageRoundTrip(t *testing.T, st host.Store) {
	ws := uid("ws")
	s := session(ws, uid("s"), at(0))
	user := host.Message{
		WorkspaceID: ws, SessionID: s.ID, ID: uid("m"), TurnID: "t-1", Role: host.RoleUser,
		Kind: host.KindText, Version: 1, Ordinal: 1,
		Content: host.MessageContent{
			Text: "model text", DisplayText: "shown text",
			Attachments: []host.AttachmentRef{{ID: "a1", Name: "x.png", MediaType: "image/png", Size: 42}, {ID: "a2"}},
			Quotes:      []host.Quote{{MessageID: "m0", Text: "quoted"}, {Text: "loose"}},
		},
		Author: "user-1", AuthorName: "Alice", CreatedAt: at(1), UpdatedAt: at(1),
	}
	tool := host.Message{
		WorkspaceID: ws, SessionID: s.ID, ID: uid("m"), TurnID: "t-1", Role: host.RoleAgent,
		Kind: host.KindToolCall, Version: 2, Ordinal: 2, Streaming: true,
		Content: host.MessageContent{Text: ""},
		Tool: &host.ToolCall{ID: "call-1", Title: "Read", Kind: "read", Status: "pending",
			Input: json.RawMessage(`{"path":"a.go","lines":[1,2]}`),
			Diffs: []host.ToolDiff{{Path: "a.go", OldText: ptr("old\n"), NewText: "new\n"}, {Path: "b.go", NewText: "created\n"}}},
		CreatedAt: at(2), UpdatedAt: at(2),
	}
	seed(t, st, []host.Session{s}, nil, []host.Message{user, tool}, nil)

	page, err := st.ListMessages(ctx(t), ws, s.ID, host.MessageQuery{})
	noErr(t, "ListMessages", err)
	if len(page.Messages) != 2 {
		t.Fatalf("got %d messages, want 2", len(page.Messages))
	}
	same(t, "user message", page.Messages[0], user, normMessage)
	same(t, "tool message", page.Messages[1], tool, normMessage)

	// PutMessage replaces by id: one row, latest content and version.
	done := tool
	done.Version, done.Streaming, done.UpdatedAt = 3, false, at(3)
	done.Tool = &host.ToolCall{ID: "call-1", Title: "Read", Kind: "read", Status: "completed", Output: "ok"}
	update(t, st, func(tx host.Tx) error {
		if err := tx.PutMessage(ctx(t), done); err != nil {
			return err
		}
		got, err := tx.Message(ctx(t), ws, s.ID, tool.ID)
		if err != nil {
			return err
		}
		same(t, "replaced message in tx", got, done, normMessage)
		return nil
	})
	page, err = st.ListMessages(ctx(t), ws, s.ID, host.MessageQuery{})
	noErr(t, "ListMessages after replace", err)
	if got := messageVersions(page.Messages); !slices.Equal(got, []int64{1, 3}) {
		t.Fatalf("versions after replace = %v, want [1 3]", got)
	}

	// A nil tool stays nil after replacing a message that had one.
	plain := done
	plain.Tool, plain.Kind, plain.Version = nil, host.KindText, 4
	update(t, st, func(tx host.Tx) error { return tx.PutMessage(ctx(t), plain) })
	update(t, st, func(tx host.Tx) error {
		got, err := tx.Message(ctx(t), ws, s.ID, tool.ID)
		if err != nil {
			return err
		}
		same(t, "message without tool", got, plain, normMessage)
		return nil
	})
}

func testClaimRoundTrip(t *testing.T, st host.Store) {
	ws := uid("ws")
	s := session(ws, uid("s"), at(0))
	c := claim(ws, uid("csid"), s.ID)
	c.Content.Attachments = []host.AttachmentRef{{ID: "a1", Size: 3}}
	c.Content.Quotes = []host.Quote{{Text: "q"}}
	seed(t, st, []host.Session{s}, nil, nil, []host.SubmitClaim{c})
	got, err := st.GetClaim(ctx(t), ws, c.ClientSubmitID)
	noErr(t, "GetClaim", err)
	same(t, "claim", got, c, normClaim)

	accepted := c
	accepted.TurnID, accepted.State, accepted.UpdatedAt = "t-1", host.ClaimAccepted, at(9)
	update(t, st, func(tx host.Tx) error {
		inTx, err := tx.Claim(ctx(t), ws, c.ClientSubmitID)
		if err != nil {
			return err
		}
		same(t, "claim in tx", inTx, c, normClaim)
		return tx.UpdateClaim(ctx(t), accepted)
	})
	got, err = st.GetClaim(ctx(t), ws, c.ClientSubmitID)
	noErr(t, "GetClaim after update", err)
	same(t, "accepted claim", got, accepted, normClaim)

	// SetClaimState moves the state and its time only, and the
	// transaction's next read sees it.
	settled := accepted
	settled.State, settled.UpdatedAt = host.ClaimRejected, at(11)
	update(t, st, func(tx host.Tx) error {
		if err := tx.SetClaimState(ctx(t), ws, c.ClientSubmitID, settled.State, settled.UpdatedAt); err != nil {
			return err
		}
		inTx, err := tx.Claim(ctx(t), ws, c.ClientSubmitID)
		if err != nil {
			return err
		}
		same(t, "claim in tx after SetClaimState", inTx, settled, normClaim)
		return nil
	})
	got, err = st.GetClaim(ctx(t), ws, c.ClientSubmitID)
	noErr(t, "GetClaim after SetClaimState", err)
	same(t, "claim after SetClaimState", got, settled, normClaim)
}

// ---- transactions ----

func testTxSeesOwnWrites(t *testing.T, st host.Store) {
	ws := uid("ws")
	s := session(ws, uid("s"), at(0))
	tu := turn(ws, s.ID, uid("t"), 1, host.PhaseQueued)
	c := claim(ws, uid("csid"), s.ID)
	m := message(ws, s.ID, uid("m"), tu.ID, 1)
	update(t, st, func(tx host.Tx) error {
		c0 := ctx(t)
		if err := tx.InsertSession(c0, s); err != nil {
			return err
		}
		if err := tx.InsertTurn(c0, tu); err != nil {
			return err
		}
		if err := tx.InsertClaim(c0, c); err != nil {
			return err
		}
		if err := tx.PutMessage(c0, m); err != nil {
			return err
		}
		s2 := s
		s2.MessageVersion = 1
		if err := tx.UpdateSession(c0, s2); err != nil {
			return err
		}
		got, err := tx.Session(c0, ws, s.ID)
		if err != nil {
			return fmt.Errorf("read own session: %w", err)
		}
		if got.MessageVersion != 1 {
			return fmt.Errorf("own update not visible: MessageVersion = %d", got.MessageVersion)
		}
		if _, err := tx.Turn(c0, ws, s.ID, tu.ID); err != nil {
			return fmt.Errorf("read own turn: %w", err)
		}
		if _, err := tx.Claim(c0, ws, c.ClientSubmitID); err != nil {
			return fmt.Errorf("read own claim: %w", err)
		}
		if _, err := tx.Message(c0, ws, s.ID, m.ID); err != nil {
			return fmt.Errorf("read own message: %w", err)
		}
		return nil
	})
}

func testUpdateRollsBack(t *testing.T, st host.Store) {
	ws := uid("ws")
	s := session(ws, uid("s"), at(0))
	typed := host.Errorf(host.CodeSessionBusy, "busy")
	err := st.Update(ctx(t), func(tx host.Tx) error {
		if err := tx.InsertSession(ctx(t), s); err != nil {
			return err
		}
		if _, err := tx.AppendFacts(ctx(t), host.Fact{WorkspaceID: ws, Kind: host.FactSessionChanged, SessionID: s.ID}); err != nil {
			return err
		}
		return typed
	})
	var he *host.Error
	if !errors.As(err, &he) || he != typed {
		t.Fatalf("Update returned %v (%T), want fn's *host.Error unchanged", err, err)
	}
	_, err = st.GetSession(ctx(t), ws, s.ID)
	wantIs(t, "session after rollback", err, host.ErrNotFound)
	rows, err := st.PendingFacts(ctx(t), time.Now().Add(time.Minute), 1000)
	noErr(t, "PendingFacts", err)
	for _, r := range rows {
		if r.Fact.WorkspaceID == ws {
			t.Fatalf("rolled-back fact is pending: %+v", r)
		}
	}

	sentinel := errors.New("plain failure")
	err = st.Update(ctx(t), func(tx host.Tx) error { return sentinel })
	if err != sentinel {
		t.Fatalf("Update returned %v, want the sentinel unchanged", err)
	}
	// The store still works after failed transactions.
	seed(t, st, []host.Session{s}, nil, nil, nil)
}

func testNotFound(t *testing.T, st host.Store) {
	ws := uid("ws")
	s := session(ws, uid("s"), at(0))
	seed(t, st, []host.Session{s}, nil, nil, nil)

	_, err := st.GetSession(ctx(t), ws, "missing")
	wantIs(t, "GetSession", err, host.ErrNotFound)
	_, err = st.GetTurn(ctx(t), ws, s.ID, "missing")
	wantIs(t, "GetTurn", err, host.ErrNotFound)
	_, err = st.GetClaim(ctx(t), ws, "missing")
	wantIs(t, "GetClaim", err, host.ErrNotFound)

	checks := []struct {
		name string
		fn   func(tx host.Tx) error
	}{
		{"Tx.Session", func(tx host.Tx) error { _, err := tx.Session(ctx(t), ws, "missing"); return err }},
		{"Tx.Turn", func(tx host.Tx) error { _, err := tx.Turn(ctx(t), ws, s.ID, "missing"); return err }},
		{"Tx.Claim", func(tx host.Tx) error { _, err := tx.Claim(ctx(t), ws, "missing"); return err }},
		{"Tx.Message", func(tx host.Tx) error { _, err := tx.Message(ctx(t), ws, s.ID, "missing"); return err }},
		{"UpdateSession", func(tx host.Tx) error { return tx.UpdateSession(ctx(t), session(ws, "missing", at(0))) }},
		{"UpdateTurn", func(tx host.Tx) error {
			return tx.UpdateTurn(ctx(t), turn(ws, s.ID, "missing", 1, host.PhaseQueued))
		}},
		{"UpdateClaim", func(tx host.Tx) error { return tx.UpdateClaim(ctx(t), claim(ws, "missing", s.ID)) }},
		{"ExpectOutput", func(tx host.Tx) error { return tx.ExpectOutput(ctx(t), ws, s.ID, "missing", 0, 0) }},
		{"SetClaimState", func(tx host.Tx) error {
			return tx.SetClaimState(ctx(t), ws, "missing", host.ClaimAccepted, at(1))
		}},
		{"DeleteProvisionalSession", func(tx host.Tx) error { return tx.DeleteProvisionalSession(ctx(t), ws, "missing") }},
	}
	for _, c := range checks {
		wantIs(t, c.name, st.Update(ctx(t), c.fn), host.ErrNotFound)
	}
}

func testDuplicates(t *testing.T, st host.Store) {
	ws, other := uid("ws"), uid("ws")
	s := session(ws, uid("s"), at(0))
	t1 := turn(ws, s.ID, uid("t"), 1, host.PhaseSettled)
	t1.ProviderSessionID, t1.ProviderTurnID, t1.Outcome = "ps", "pt-1", host.OutcomeCompleted
	t2 := turn(ws, s.ID, uid("t"), 2, host.PhaseQueued)
	t3 := turn(ws, s.ID, uid("t"), 3, host.PhaseQueued) // unbound, like t2: exempt from the identity index
	c := claim(ws, uid("csid"), s.ID)
	seed(t, st, []host.Session{s}, []host.Turn{t1, t2, t3}, nil, []host.SubmitClaim{c})

	dupTurnID := turn(ws, s.ID, t1.ID, 9, host.PhaseQueued)
	dupSeq := turn(ws, s.ID, uid("t"), 2, host.PhaseQueued)
	dupIdentity := turn(ws, s.ID, uid("t"), 10, host.PhaseDurablyAccepted)
	dupIdentity.ProviderSessionID, dupIdentity.ProviderTurnID = "ps", "pt-1"
	rebind := t2
	rebind.Phase, rebind.ProviderSessionID, rebind.ProviderTurnID = host.PhaseDurablyAccepted, "ps", "pt-1"
	checks := []struct {
		name string
		fn   func(tx host.Tx) error
	}{
		{"session id", func(tx host.Tx) error { return tx.InsertSession(ctx(t), session(ws, s.ID, at(1))) }},
		{"turn id", func(tx host.Tx) error { return tx.InsertTurn(ctx(t), dupTurnID) }},
		{"turn seq", func(tx host.Tx) error { return tx.InsertTurn(ctx(t), dupSeq) }},
		{"provider identity on insert", func(tx host.Tx) error { return tx.InsertTurn(ctx(t), dupIdentity) }},
		{"provider identity on update", func(tx host.Tx) error { return tx.UpdateTurn(ctx(t), rebind) }},
		{"claim", func(tx host.Tx) error { return tx.InsertClaim(ctx(t), claim(ws, c.ClientSubmitID, s.ID)) }},
	}
	for _, ch := range checks {
		wantIs(t, ch.name, st.Update(ctx(t), ch.fn), host.ErrDuplicate)
	}
	// An admission's claim: the duplicate fails the whole transaction,
	// whenever the store reports it, and nothing written with it commits.
	fresh := session(ws, uid("s"), at(2))
	err := st.Update(ctx(t), func(tx host.Tx) error {
		if err := tx.AdmitClaim(ctx(t), claim(ws, c.ClientSubmitID, s.ID)); err != nil {
			return err
		}
		return tx.InsertSession(ctx(t), fresh)
	})
	wantIs(t, "admitted claim", err, host.ErrDuplicate)
	if _, err := st.GetSession(ctx(t), ws, fresh.ID); !errors.Is(err, host.ErrNotFound) {
		t.Fatalf("a session written with a duplicate admitted claim: %v, want ErrNotFound", err)
	}

	// The same ids in another workspace are distinct records.
	os := session(other, s.ID, at(0))
	ot := turn(other, s.ID, t1.ID, 1, host.PhaseSettled)
	ot.ProviderSessionID, ot.ProviderTurnID, ot.Outcome = "ps", "pt-1", host.OutcomeCompleted
	seed(t, st, []host.Session{os}, []host.Turn{ot}, nil, []host.SubmitClaim{claim(other, c.ClientSubmitID, s.ID)})
}

func testWorkspaceScoping(t *testing.T, st host.Store) {
	wsA, wsB := uid("ws"), uid("ws")
	s := session(wsA, uid("s"), at(0))
	tu := turn(wsA, s.ID, uid("t"), 1, host.PhaseQueued)
	m := message(wsA, s.ID, uid("m"), tu.ID, 1)
	c := claim(wsA, uid("csid"), s.ID)
	seed(t, st, []host.Session{s}, []host.Turn{tu}, []host.Message{m}, []host.SubmitClaim{c})
	visible := s

	_, err := st.GetSession(ctx(t), wsB, s.ID)
	wantIs(t, "GetSession from B", err, host.ErrNotFound)
	_, err = st.GetTurn(ctx(t), wsB, s.ID, tu.ID)
	wantIs(t, "GetTurn from B", err, host.ErrNotFound)
	_, err = st.GetClaim(ctx(t), wsB, c.ClientSubmitID)
	wantIs(t, "GetClaim from B", err, host.ErrNotFound)

	sp, err := st.ListSessions(ctx(t), wsB, host.SessionQuery{})
	noErr(t, "ListSessions B", err)
	tpg, err := st.ListTurns(ctx(t), wsB, s.ID, host.TurnQuery{})
	noErr(t, "ListTurns B", err)
	mp, err := st.ListMessages(ctx(t), wsB, s.ID, host.MessageQuery{})
	noErr(t, "ListMessages B", err)
	if len(sp.Sessions)+len(tpg.Turns)+len(mp.Messages) != 0 {
		t.Fatalf("workspace B sees A's data: %d sessions, %d turns, %d messages",
			len(sp.Sessions), len(tpg.Turns), len(mp.Messages))
	}

	asB := func(x any) any {
		switch v := x.(type) {
		case host.Session:
			v.WorkspaceID = wsB
			return v
		case host.Turn:
			v.WorkspaceID = wsB
			return v
		case host.SubmitClaim:
			v.WorkspaceID = wsB
			return v
		}
		return x
	}
	checks := []struct {
		name string
		fn   func(tx host.Tx) error
	}{
		{"Tx.Session", func(tx host.Tx) error { _, err := tx.Session(ctx(t), wsB, s.ID); return err }},
		{"Tx.Turn", func(tx host.Tx) error { _, err := tx.Turn(ctx(t), wsB, s.ID, tu.ID); return err }},
		{"Tx.Claim", func(tx host.Tx) error { _, err := tx.Claim(ctx(t), wsB, c.ClientSubmitID); return err }},
		{"Tx.Message", func(tx host.Tx) error { _, err := tx.Message(ctx(t), wsB, s.ID, m.ID); return err }},
		{"UpdateSession", func(tx host.Tx) error {
			v := asB(visible).(host.Session)
			v.Title = "hijacked"
			return tx.UpdateSession(ctx(t), v)
		}},
		{"UpdateTurn", func(tx host.Tx) error {
			v := asB(tu).(host.Turn)
			v.Phase = host.PhaseDispatched
			return tx.UpdateTurn(ctx(t), v)
		}},
		{"UpdateClaim", func(tx host.Tx) error {
			v := asB(c).(host.SubmitClaim)
			v.State = host.ClaimRejected
			return tx.UpdateClaim(ctx(t), v)
		}},
		{"DeleteProvisionalSession", func(tx host.Tx) error { return tx.DeleteProvisionalSession(ctx(t), wsB, s.ID) }},
	}
	for _, ch := range checks {
		wantIs(t, ch.name+" from B", st.Update(ctx(t), ch.fn), host.ErrNotFound)
	}

	// A is untouched.
	gotS, err := st.GetSession(ctx(t), wsA, s.ID)
	noErr(t, "GetSession A", err)
	same(t, "session A", gotS, visible, normSession)
	gotT, err := st.GetTurn(ctx(t), wsA, s.ID, tu.ID)
	noErr(t, "GetTurn A", err)
	same(t, "turn A", gotT, tu, normTurn)
	gotC, err := st.GetClaim(ctx(t), wsA, c.ClientSubmitID)
	noErr(t, "GetClaim A", err)
	same(t, "claim A", gotC, c, normClaim)
	sp, err = st.ListSessions(ctx(t), wsA, host.SessionQuery{})
	noErr(t, "ListSessions A", err)
	if got := sessionIDs(sp.Sessions); !slices.Equal(got, []string{s.ID}) {
		t.Fatalf("ListSessions A = %v, want [%s]", got, s.ID)
	}
}

// ---- listing ----

func testListSessionsPaging(t *testing.T, st host.Store) {
	ws := uid("ws")
	// Two pairs share created_at so the id tie-break is exercised.
	var all []host.Session
	for i, off := range []int64{0, 1, 1, 2, 3, 3, 4} {
		all = append(all, session(ws, fmt.Sprintf("s%d-%s", i, uid("x")), at(off)))
	}
	prov := session(ws, uid("prov"), at(100))
	prov.Provisional = true
	deleted := session(ws, uid("del"), at(101))
	deleted.DeletedAt = tp(at(102))
	seed(t, st, append(slices.Clone(all), prov, deleted), nil, nil, nil)

	want := slices.Clone(all)
	slices.SortFunc(want, func(a, b host.Session) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		if a.ID > b.ID {
			return -1
		}
		return 1
	})

	var got []string
	cursor, pages := "", 0
	for {
		page, err := st.ListSessions(ctx(t), ws, host.SessionQuery{Cursor: cursor, Limit: 3})
		noErr(t, "ListSessions", err)
		pages++
		if len(page.Sessions) > 3 {
			t.Fatalf("page has %d sessions, limit 3", len(page.Sessions))
		}
		got = append(got, sessionIDs(page.Sessions)...)
		if page.NextCursor == "" {
			break
		}
		if pages > 10 {
			t.Fatal("cursor does not terminate")
		}
		cursor = page.NextCursor
	}
	if pages != 3 {
		t.Fatalf("7 sessions at limit 3 took %d pages, want 3", pages)
	}
	if w := sessionIDs(want); !slices.Equal(got, w) {
		t.Fatalf("sessions = %v\nwant       %v", got, w)
	}

	// An exact multiple of the limit ends with an empty NextCursor.
	page, err := st.ListSessions(ctx(t), ws, host.SessionQuery{Limit: 7})
	noErr(t, "ListSessions limit 7", err)
	if len(page.Sessions) != 7 || page.NextCursor != "" {
		t.Fatalf("limit 7: %d sessions, cursor %q; want 7 and no cursor", len(page.Sessions), page.NextCursor)
	}
	// GetSession still finds the hidden ones: visibility is the Host's call.
	for _, id := range []string{prov.ID, deleted.ID} {
		if _, err := st.GetSession(ctx(t), ws, id); err != nil {
			t.Fatalf("GetSession(%s): %v", id, err)
		}
	}
}

func testListSessionsLimits(t *testing.T, st host.Store) {
	ws := uid("ws")
	var ss []host.Session
	for i := range 205 {
		ss = append(ss, session(ws, fmt.Sprintf("s%03d", i), at(int64(i))))
	}
	seed(t, st, ss, nil, nil, nil)
	for _, c := range []struct{ limit, want int }{{0, 50}, {-1, 50}, {1000, 200}, {10, 10}} {
		page, err := st.ListSessions(ctx(t), ws, host.SessionQuery{Limit: c.limit})
		noErr(t, "ListSessions", err)
		if len(page.Sessions) != c.want || page.NextCursor == "" {
			t.Fatalf("Limit %d: %d sessions (cursor %q), want %d and a cursor", c.limit, len(page.Sessions), page.NextCursor, c.want)
		}
	}
}

func testListTurnsPaging(t *testing.T, st host.Store) {
	ws := uid("ws")
	s := session(ws, uid("s"), at(0))
	other := session(ws, uid("s"), at(0))
	var turns []host.Turn
	for seq := int64(1); seq <= 7; seq++ {
		turns = append(turns, turn(ws, s.ID, uid("t"), seq, host.PhaseQueued))
	}
	turns = append(turns, turn(ws, other.ID, uid("t"), 8, host.PhaseQueued))
	seed(t, st, []host.Session{s, other}, turns, nil, nil)

	steps := []struct {
		before   int64
		want     []int64
		hasMore  bool
		nextSeq  int64
		describe string
	}{
		{0, []int64{7, 6, 5}, true, 5, "newest"},
		{5, []int64{4, 3, 2}, true, 2, "before 5"},
		{2, []int64{1}, false, 0, "before 2"},
		{1, []int64{}, false, 0, "before 1"},
	}
	for _, step := range steps {
		page, err := st.ListTurns(ctx(t), ws, s.ID, host.TurnQuery{Before: step.before, Limit: 3})
		noErr(t, "ListTurns "+step.describe, err)
		if got := turnSeqs(page.Turns); !slices.Equal(got, step.want) || page.HasMore != step.hasMore || page.NextCursor != step.nextSeq {
			t.Fatalf("%s: seqs %v hasMore %v next %d; want %v %v %d", step.describe,
				got, page.HasMore, page.NextCursor, step.want, step.hasMore, step.nextSeq)
		}
	}
	page, err := st.ListTurns(ctx(t), ws, s.ID, host.TurnQuery{Limit: 7})
	noErr(t, "ListTurns limit 7", err)
	if len(page.Turns) != 7 || page.HasMore || page.NextCursor != 0 {
		t.Fatalf("limit 7: %d turns hasMore %v next %d; want 7, false, 0", len(page.Turns), page.HasMore, page.NextCursor)
	}
	same(t, "listed turn", page.Turns[0], turns[6], normTurn)
}

func testListTurnsLimits(t *testing.T, st host.Store) {
	ws := uid("ws")
	s := session(ws, uid("s"), at(0))
	var turns []host.Turn
	for seq := int64(1); seq <= 205; seq++ {
		turns = append(turns, turn(ws, s.ID, fmt.Sprintf("t%03d", seq), seq, host.PhaseSettled))
	}
	seed(t, st, []host.Session{s}, turns, nil, nil)
	for _, c := range []struct{ limit, want int }{{0, 50}, {1000, 200}} {
		page, err := st.ListTurns(ctx(t), ws, s.ID, host.TurnQuery{Limit: c.limit})
		noErr(t, "ListTurns", err)
		if len(page.Turns) != c.want || !page.HasMore {
			t.Fatalf("Limit %d: %d turns hasMore %v, want %d and more", c.limit, len(page.Turns), page.HasMore, c.want)
		}
	}
}

func testListMessagesVersions(t *testing.T, st host.Store) {
	ws := uid("ws")
	s := session(ws, uid("s"), at(0))
	other := session(ws, uid("s"), at(0))
	var msgs []host.Message
	for v := int64(1); v <= 10; v++ {
		turnID := "t-odd"
		if v%2 == 0 {
			turnID = "t-even"
		}
		msgs = append(msgs, message(ws, s.ID, fmt.Sprintf("m%02d", v), turnID, v))
	}
	msgs = append(msgs, message(ws, other.ID, "m01", "t-odd", 1))
	seed(t, st, []host.Session{s, other}, nil, msgs, nil)

	cases := []struct {
		name    string
		q       host.MessageQuery
		want    []int64
		hasMore bool
	}{
		{"all", host.MessageQuery{}, []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, false},
		{"first page", host.MessageQuery{Limit: 4}, []int64{1, 2, 3, 4}, true},
		{"after 3", host.MessageQuery{AfterVersion: 3, Limit: 4}, []int64{4, 5, 6, 7}, true},
		{"after 7", host.MessageQuery{AfterVersion: 7, Limit: 4}, []int64{8, 9, 10}, false},
		{"after last", host.MessageQuery{AfterVersion: 10}, []int64{}, false},
		{"before 8", host.MessageQuery{BeforeVersion: 8, Limit: 3}, []int64{5, 6, 7}, true},
		{"before 4", host.MessageQuery{BeforeVersion: 4, Limit: 3}, []int64{1, 2, 3}, false},
		{"before 1", host.MessageQuery{BeforeVersion: 1, Limit: 3}, []int64{}, false},
		{"between", host.MessageQuery{AfterVersion: 2, BeforeVersion: 6}, []int64{3, 4, 5}, false},
		{"between limited", host.MessageQuery{AfterVersion: 2, BeforeVersion: 9, Limit: 2}, []int64{3, 4}, true},
		{"turn", host.MessageQuery{TurnID: "t-even"}, []int64{2, 4, 6, 8, 10}, false},
		{"turn after", host.MessageQuery{TurnID: "t-odd", AfterVersion: 3, Limit: 2}, []int64{5, 7}, true},
		{"turn before", host.MessageQuery{TurnID: "t-odd", BeforeVersion: 9, Limit: 2}, []int64{5, 7}, true},
		{"unknown turn", host.MessageQuery{TurnID: "nope"}, []int64{}, false},
	}
	for _, c := range cases {
		page, err := st.ListMessages(ctx(t), ws, s.ID, c.q)
		noErr(t, "ListMessages "+c.name, err)
		if got := messageVersions(page.Messages); !slices.Equal(got, c.want) || page.HasMore != c.hasMore {
			t.Fatalf("%s: versions %v hasMore %v; want %v %v", c.name, got, page.HasMore, c.want, c.hasMore)
		}
	}

	// A change moves a message to the session's newest version: a reader
	// syncing after 10 sees exactly that change.
	changed := msgs[0]
	changed.Version, changed.Content.Text, changed.UpdatedAt = 11, "edited", at(11)
	update(t, st, func(tx host.Tx) error { return tx.PutMessage(ctx(t), changed) })
	page, err := st.ListMessages(ctx(t), ws, s.ID, host.MessageQuery{AfterVersion: 10})
	noErr(t, "ListMessages after change", err)
	if len(page.Messages) != 1 {
		t.Fatalf("after 10: %d messages, want the one change", len(page.Messages))
	}
	same(t, "changed message", page.Messages[0], changed, normMessage)
	page, err = st.ListMessages(ctx(t), ws, s.ID, host.MessageQuery{BeforeVersion: 3})
	noErr(t, "ListMessages before 3", err)
	if got := messageVersions(page.Messages); !slices.Equal(got, []int64{2}) {
		t.Fatalf("before 3 after the change: %v, want [2]", got)
	}
}

func testListMessagesLimits(t *testing.T, st host.Store) {
	ws := uid("ws")
	s := session(ws, uid("s"), at(0))
	var msgs []host.Message
	for v := int64(1); v <= 1001; v++ {
		msgs = append(msgs, message(ws, s.ID, fmt.Sprintf("m%04d", v), "t", v))
	}
	seed(t, st, []host.Session{s}, nil, msgs, nil)
	for _, c := range []struct{ limit, want int }{{0, 200}, {5000, 1000}} {
		page, err := st.ListMessages(ctx(t), ws, s.ID, host.MessageQuery{Limit: c.limit})
		noErr(t, "ListMessages", err)
		if len(page.Messages) != c.want || !page.HasMore {
			t.Fatalf("Limit %d: %d messages hasMore %v, want %d and more", c.limit, len(page.Messages), page.HasMore, c.want)
		}
	}
}

// ---- recovery ----

func testUnsettledAndQuarantine(t *testing.T, st host.Store) {
	wsA, wsB := uid("ws"), uid("ws")
	sa, sb := session(wsA, uid("s"), at(0)), session(wsB, uid("s"), at(0))
	queued := turn(wsA, sa.ID, uid("t"), 1, host.PhaseQueued)
	dispatched := turn(wsA, sa.ID, uid("t"), 2, host.PhaseDispatched)
	accepted := turn(wsA, sa.ID, uid("t"), 3, host.PhaseDurablyAccepted)
	accepted.ProviderSessionID, accepted.ProviderTurnID = "ps", "pt-3"
	settled := turn(wsA, sa.ID, uid("t"), 4, host.PhaseSettled)
	settled.Outcome, settled.SettledAt = host.OutcomeCompleted, tp(at(4))
	resolving := turn(wsB, sb.ID, uid("t"), 1, host.PhaseResolvingIdentity)
	seed(t, st, []host.Session{sa, sb}, []host.Turn{queued, dispatched, accepted, settled, resolving}, nil, nil)

	scan := func() map[string]host.Turn {
		t.Helper()
		turns, bad, err := st.UnsettledTurns(ctx(t))
		noErr(t, "UnsettledTurns", err)
		for _, q := range bad {
			if q.WorkspaceID == wsA || q.WorkspaceID == wsB {
				t.Fatalf("healthy turn reported as undecodable: %+v", q)
			}
		}
		out := map[string]host.Turn{}
		for _, tu := range turns {
			if tu.WorkspaceID == wsA || tu.WorkspaceID == wsB {
				out[tu.ID] = tu
			}
		}
		return out
	}
	got := scan()
	for _, want := range []host.Turn{queued, dispatched, accepted, resolving} {
		g, ok := got[want.ID]
		if !ok {
			t.Fatalf("unsettled turn %s (%s) missing", want.ID, want.Phase)
		}
		same(t, "unsettled turn", g, want, normTurn)
	}
	if _, ok := got[settled.ID]; ok || len(got) != 4 {
		t.Fatalf("UnsettledTurns returned %d turns (settled included: %v), want 4", len(got), ok)
	}

	q := host.Quarantined{
		WorkspaceID: wsA, Kind: "turn", Key: wsA + "/" + sa.ID + "/" + dispatched.ID,
		Reason: "poisoned", At: at(50),
	}
	noErr(t, "Quarantine", st.Quarantine(ctx(t), q))
	q.Reason = "poisoned again"
	noErr(t, "Quarantine repeated", st.Quarantine(ctx(t), q))
	// A quarantine of another kind with a similar key does not hide the turn.
	noErr(t, "Quarantine other kind", st.Quarantine(ctx(t), host.Quarantined{
		WorkspaceID: wsA, Kind: "message", Key: wsA + "/" + sa.ID + "/" + queued.ID, Reason: "x",
	}))
	got = scan()
	if _, ok := got[dispatched.ID]; ok {
		t.Fatal("quarantined turn still returned by UnsettledTurns")
	}
	if len(got) != 3 {
		t.Fatalf("after quarantine: %d turns, want 3", len(got))
	}
}

// ---- outbox ----

func testOutbox(t *testing.T, st host.Store) {
	ws := uid("ws")
	start := time.Now().Add(-time.Second)
	facts := []host.Fact{
		{WorkspaceID: ws, Kind: host.FactSessionChanged, SessionID: "s1"},
		{WorkspaceID: ws, Kind: host.FactTranscriptAdvanced, SessionID: "s1", TurnID: "t1", Version: 3},
		{WorkspaceID: ws, Kind: host.FactSessionChanged, SessionID: "s2", Version: 1},
	}
	// The ids are read after the commit: a store may fill them with it.
	var first, rest []int64
	update(t, st, func(tx host.Tx) (err error) {
		if first, err = tx.AppendFacts(ctx(t), facts[0]); err != nil {
			return err
		}
		rest, err = tx.AppendFacts(ctx(t), facts[1:]...)
		return err
	})
	// The facts of one call share a row: a transaction writes one.
	ids := append(slices.Clone(first), rest...)
	if len(ids) != 3 || ids[0] >= ids[1] || ids[1] != ids[2] {
		t.Fatalf("AppendFacts ids = %v, want two rows: [a b b] with a < b", ids)
	}
	end := time.Now().Add(time.Second)

	mine := func(rows []host.OutboxRow) []host.OutboxRow {
		var out []host.OutboxRow
		for _, r := range rows {
			if r.Fact.WorkspaceID == ws {
				out = append(out, r)
			}
		}
		return out
	}
	rows, err := st.PendingFacts(ctx(t), end, 1000)
	noErr(t, "PendingFacts", err)
	got := mine(rows)
	if len(got) != 3 {
		t.Fatalf("pending: %d of ours, want 3", len(got))
	}
	for i, r := range got {
		if r.ID != ids[i] || !reflect.DeepEqual(r.Fact, facts[i]) {
			t.Fatalf("pending[%d] = %+v, want id %d fact %+v", i, r, ids[i], facts[i])
		}
		if r.At.Before(start) || r.At.After(end) {
			t.Fatalf("pending[%d].At = %v, want between %v and %v", i, r.At, start, end)
		}
	}
	if !slices.IsSortedFunc(rows, func(a, b host.OutboxRow) int { return a.At.Compare(b.At) }) {
		t.Fatal("PendingFacts not oldest first")
	}

	rows, err = st.PendingFacts(ctx(t), start.Add(-time.Hour), 1000)
	noErr(t, "PendingFacts before append", err)
	if len(mine(rows)) != 0 {
		t.Fatal("PendingFacts returned facts created after the cutoff")
	}
	// The limit counts rows, and a row's facts come whole: limit 2 gives
	// the first two pending rows (ours, unless another subtest sharing the
	// store left older ones), every fact of each.
	all, err := st.PendingFacts(ctx(t), end, 1000)
	noErr(t, "PendingFacts", err)
	var firstTwo []host.OutboxRow
	for i, n := 0, 0; i < len(all); i++ {
		if i == 0 || all[i].ID != all[i-1].ID {
			if n++; n > 2 {
				break
			}
		}
		firstTwo = append(firstTwo, all[i])
	}
	rows, err = st.PendingFacts(ctx(t), end, 2)
	noErr(t, "PendingFacts limit 2", err)
	if !reflect.DeepEqual(rows, firstTwo) {
		t.Fatalf("limit 2 returned %+v, want the first two rows whole: %+v", rows, firstTwo)
	}

	noErr(t, "MarkPublished", st.MarkPublished(ctx(t), ids[:1]))
	noErr(t, "MarkPublished again", st.MarkPublished(ctx(t), ids[:1]))
	noErr(t, "MarkPublished none", st.MarkPublished(ctx(t), nil))
	rows, err = st.PendingFacts(ctx(t), end, 1000)
	noErr(t, "PendingFacts after publish", err)
	got = mine(rows)
	if len(got) != 2 || got[0].ID != ids[1] || got[1].ID != ids[2] ||
		!reflect.DeepEqual(got[0].Fact, facts[1]) || !reflect.DeepEqual(got[1].Fact, facts[2]) {
		t.Fatalf("pending after publishing the first row: %+v, want the second row's two facts", got)
	}

	// Facts of two workspaces appended together go in two rows, each
	// scoped to its workspace.
	other := uid("ws")
	var two []int64
	update(t, st, func(tx host.Tx) (err error) {
		two, err = tx.AppendFacts(ctx(t), host.Fact{WorkspaceID: ws, Kind: host.FactSessionChanged, SessionID: "s3"},
			host.Fact{WorkspaceID: other, Kind: host.FactSessionChanged, SessionID: "s4"})
		return err
	})
	if len(two) != 2 || two[0] >= two[1] || two[0] <= ids[2] {
		t.Fatalf("AppendFacts of two workspaces: ids %v, want two new rows", two)
	}
	noErr(t, "MarkPublished", st.MarkPublished(ctx(t), append(ids, two...)))
}

// testOutboxClaimsWholeRows: a relay claims a transaction's row with all
// its facts, in the order they were appended, and another relay's claim
// skips every one of them until the lease ends.
func testOutboxClaimsWholeRows(t *testing.T, st host.Store) {
	ws := uid("ws")
	var facts []host.Fact
	for v := range 20 {
		facts = append(facts, host.Fact{WorkspaceID: ws, Kind: host.FactTranscriptAdvanced, SessionID: "s1", Version: int64(v + 1)})
	}
	update(t, st, func(tx host.Tx) error {
		_, err := tx.AppendFacts(ctx(t), facts...)
		return err
	})
	end := time.Now().Add(time.Second)
	var ids []int64
	mine := func(rows []host.OutboxRow) []host.Fact {
		var out []host.Fact
		for _, r := range rows {
			if r.Fact.WorkspaceID == ws {
				out = append(out, r.Fact)
				ids = append(ids, r.ID)
			}
		}
		return out
	}
	rows, err := st.ClaimFacts(ctx(t), end, 1000, time.Minute)
	noErr(t, "ClaimFacts", err)
	if got := mine(rows); !reflect.DeepEqual(got, facts) {
		t.Fatalf("claimed %d facts of the row %+v, want its 20 in order", len(got), got)
	}
	again, err := st.ClaimFacts(ctx(t), end, 1000, time.Minute)
	noErr(t, "ClaimFacts again", err)
	if got := mine(again); len(got) != 0 {
		t.Fatalf("a second claim took %d facts of a claimed row", len(got))
	}
	noErr(t, "MarkPublished", st.MarkPublished(ctx(t), ids))

	// The limit counts rows, not facts: two rows of three facts fit a
	// limit of two, whole. Every other pending row is held by the claims
	// above, so these two are the only ones to claim.
	ws2 := uid("ws")
	var two []host.Fact
	for r := range 2 {
		row := make([]host.Fact, 3)
		for i := range row {
			row[i] = host.Fact{WorkspaceID: ws2, Kind: host.FactTranscriptAdvanced, SessionID: "s2", Version: int64(3*r + i + 1)}
		}
		update(t, st, func(tx host.Tx) error {
			_, err := tx.AppendFacts(ctx(t), row...)
			return err
		})
		two = append(two, row...)
	}
	rows, err = st.ClaimFacts(ctx(t), time.Now().Add(time.Second), 2, time.Minute)
	noErr(t, "ClaimFacts limit 2", err)
	var got []host.Fact
	ids = ids[:0]
	for _, r := range rows {
		if r.Fact.WorkspaceID == ws2 {
			got = append(got, r.Fact)
			ids = append(ids, r.ID)
		}
	}
	if !reflect.DeepEqual(got, two) {
		t.Fatalf("limit 2 claimed %d facts %+v, want both rows' 6 in order", len(got), got)
	}
	noErr(t, "MarkPublished", st.MarkPublished(ctx(t), ids))
}

// ---- compensation ----

func testDeleteProvisionalSession(t *testing.T, st host.Store) {
	ws := uid("ws")
	prov := session(ws, uid("s"), at(0))
	prov.Provisional = true
	keep := session(ws, uid("s"), at(1))
	pt := turn(ws, prov.ID, uid("t"), 1, host.PhaseQueued)
	kt := turn(ws, keep.ID, uid("t"), 1, host.PhaseQueued)
	pm := message(ws, prov.ID, uid("m"), pt.ID, 1)
	km := message(ws, keep.ID, uid("m"), kt.ID, 1)
	pc, kc := claim(ws, uid("csid"), prov.ID), claim(ws, uid("csid"), keep.ID)
	seed(t, st, []host.Session{prov, keep}, []host.Turn{pt, kt}, []host.Message{pm, km}, []host.SubmitClaim{pc, kc})

	// Provisional sessions are invisible in listings but readable by id.
	page, err := st.ListSessions(ctx(t), ws, host.SessionQuery{})
	noErr(t, "ListSessions", err)
	if got := sessionIDs(page.Sessions); !slices.Equal(got, []string{keep.ID}) {
		t.Fatalf("ListSessions = %v, want only %s", got, keep.ID)
	}
	got, err := st.GetSession(ctx(t), ws, prov.ID)
	noErr(t, "GetSession provisional", err)
	if !got.Provisional {
		t.Fatal("provisional flag lost")
	}

	err = st.Update(ctx(t), func(tx host.Tx) error { return tx.DeleteProvisionalSession(ctx(t), ws, keep.ID) })
	if err == nil {
		t.Fatal("DeleteProvisionalSession deleted a visible session")
	}
	if errors.Is(err, host.ErrNotFound) {
		t.Fatalf("deleting a visible session: %v; want a refusal, not not-found", err)
	}

	update(t, st, func(tx host.Tx) error { return tx.DeleteProvisionalSession(ctx(t), ws, prov.ID) })
	_, err = st.GetSession(ctx(t), ws, prov.ID)
	wantIs(t, "deleted session", err, host.ErrNotFound)
	_, err = st.GetTurn(ctx(t), ws, prov.ID, pt.ID)
	wantIs(t, "deleted turn", err, host.ErrNotFound)
	_, err = st.GetClaim(ctx(t), ws, pc.ClientSubmitID)
	wantIs(t, "deleted claim", err, host.ErrNotFound)
	mp, err := st.ListMessages(ctx(t), ws, prov.ID, host.MessageQuery{})
	noErr(t, "ListMessages deleted", err)
	if len(mp.Messages) != 0 {
		t.Fatalf("%d messages survive the provisional delete", len(mp.Messages))
	}

	// The neighbour is intact.
	_, err = st.GetTurn(ctx(t), ws, keep.ID, kt.ID)
	noErr(t, "kept turn", err)
	_, err = st.GetClaim(ctx(t), ws, kc.ClientSubmitID)
	noErr(t, "kept claim", err)
	mp, err = st.ListMessages(ctx(t), ws, keep.ID, host.MessageQuery{})
	noErr(t, "kept messages", err)
	if len(mp.Messages) != 1 {
		t.Fatalf("kept session has %d messages, want 1", len(mp.Messages))
	}
	// The id may be reused after compensation.
	seed(t, st, []host.Session{prov}, nil, nil, nil)
}

// ---- concurrency ----

func testConcurrentUpdate(t *testing.T, st host.Store) {
	ws := uid("ws")
	s := session(ws, uid("s"), at(0))
	seed(t, st, []host.Session{s}, nil, nil, nil)

	const writers = 20
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for range writers {
		wg.Go(func() {
			errs <- st.Update(ctx(t), func(tx host.Tx) error {
				cur, err := tx.Session(ctx(t), ws, s.ID)
				if err != nil {
					return err
				}
				cur.MessageVersion++
				return tx.UpdateSession(ctx(t), cur)
			})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		noErr(t, "concurrent Update", err)
	}
	got, err := st.GetSession(ctx(t), ws, s.ID)
	noErr(t, "GetSession", err)
	if got.MessageVersion != writers {
		t.Fatalf("MessageVersion = %d after %d increments: lost update", got.MessageVersion, writers)
	}
}

// ---- lifecycle ----

func testClosed(t *testing.T, st host.Store) {
	ws := uid("ws")
	s := session(ws, uid("s"), at(0))
	seed(t, st, []host.Session{s}, nil, nil, nil)
	noErr(t, "Ping while open", st.Ping(ctx(t)))
	noErr(t, "Close", st.Close())
	wantIs(t, "Ping after Close", st.Ping(ctx(t)), host.ErrUnavailable)

	_, err := st.GetSession(ctx(t), ws, s.ID)
	wantIs(t, "GetSession after Close", err, host.ErrUnavailable)
	err = st.Update(ctx(t), func(tx host.Tx) error { return nil })
	wantIs(t, "Update after Close", err, host.ErrUnavailable)
	_, _, err = st.UnsettledTurns(ctx(t))
	wantIs(t, "UnsettledTurns after Close", err, host.ErrUnavailable)
	err = st.MarkPublished(ctx(t), []int64{1})
	wantIs(t, "MarkPublished after Close", err, host.ErrUnavailable)
	if host.CodeOf(err) != host.CodeUnavailable {
		t.Fatalf("CodeOf(closed store error) = %s, want unavailable", host.CodeOf(err))
	}
}

func ptr[T any](v T) *T { return &v }
