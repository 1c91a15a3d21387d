package sqlstore

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// Cursors already handed to clients must keep decoding: the encoding is
// base64url("<time>:<id>") without padding.
func TestCursorEncodingIsStable(t *testing.T) {
	c := EncodeCursor(1700000000123, "s:1")
	if c != "MTcwMDAwMDAwMDEyMzpzOjE" {
		t.Fatalf("cursor encoding changed: %q", c)
	}
	at, id, err := DecodeCursor(c)
	if err != nil || at != 1700000000123 || id != "s:1" {
		t.Fatalf("DecodeCursor: %d %q %v", at, id, err)
	}
	for _, bad := range []string{"!!", "bm9jb2xvbg", "eDp5"} { // not base64, "nocolon", "x:y"
		if _, _, err := DecodeCursor(bad); host.CodeOf(err) != host.CodeInvalidInput {
			t.Errorf("DecodeCursor(%q): %v, want invalid input", bad, err)
		}
	}
}

func TestSettingsRoundTrip(t *testing.T) {
	if v, err := EncodeSettings(map[string]string{}); v != nil || err != nil {
		t.Fatalf("empty settings encode as %v, %v; want NULL", v, err)
	}
	v, err := EncodeSettings(map[string]string{"model": "m"})
	if err != nil || *v != `{"model":"m"}` {
		t.Fatalf("EncodeSettings: %v %v", v, err)
	}
	if m, err := DecodeSettings(v); err != nil || m["model"] != "m" {
		t.Fatalf("DecodeSettings: %v %v", m, err)
	}
	for _, empty := range []*string{nil, ptr(""), ptr("{}")} {
		if m, err := DecodeSettings(empty); m != nil || err != nil {
			t.Errorf("DecodeSettings(%v) = %v, %v; want none", empty, m, err)
		}
	}
	if _, err := DecodeSettings(ptr("[")); err == nil {
		t.Error("DecodeSettings accepted malformed JSON")
	}
}

func TestNullJSON(t *testing.T) {
	if v, err := NullJSON[host.ToolCall](nil); v != nil || err != nil {
		t.Fatalf("nil encodes as %v, %v; want NULL", v, err)
	}
	v, err := NullJSON(&struct{ A int }{1})
	if err != nil || *v != `{"A":1}` {
		t.Fatalf("NullJSON: %v %v", v, err)
	}
}

func TestCheckTurn(t *testing.T) {
	ok := host.Turn{WorkspaceID: "w", SessionID: "s", ID: "t", Phase: host.TurnPhase("settled"), Outcome: host.OutcomeCompleted}
	if !ok.Phase.Valid() {
		t.Fatal("test turn phase invalid")
	}
	if err := CheckTurn(&ok, `{}`); err != nil {
		t.Fatalf("valid turn: %v", err)
	}
	for name, c := range map[string]struct {
		turn   host.Turn
		labels string
	}{
		"labels":  {ok, `{`},
		"phase":   {func() host.Turn { x := ok; x.Phase = "bogus"; return x }(), `{}`},
		"outcome": {func() host.Turn { x := ok; x.Outcome = "bogus"; return x }(), `{}`},
	} {
		err := CheckTurn(&c.turn, c.labels)
		var de *DecodeError
		if !errors.As(err, &de) || de.What != "turn "+TurnRef(ok).Key() {
			t.Errorf("%s: %v, want a DecodeError naming the turn", name, err)
		}
	}
}

func TestPages(t *testing.T) {
	turns := []host.Turn{{Seq: 5}, {Seq: 4}, {Seq: 3}}
	if p := TurnPage(turns, 2); !p.HasMore || len(p.Turns) != 2 || p.NextCursor != 4 {
		t.Fatalf("TurnPage: %+v", p)
	}
	if p := TurnPage(turns, 3); p.HasMore || len(p.Turns) != 3 || p.NextCursor != 0 {
		t.Fatalf("TurnPage (complete): %+v", p)
	}
	msgs := []host.Message{{Version: 9}, {Version: 8}, {Version: 7}}
	p := MessagePage(msgs, 2, true)
	if !p.HasMore || !slices.Equal([]int64{p.Messages[0].Version, p.Messages[1].Version}, []int64{8, 9}) {
		t.Fatalf("MessagePage backward: %+v", p)
	}
	at := time.UnixMilli(1700000000000)
	sessions := []host.Session{{ID: "a", CreatedAt: at}, {ID: "b", CreatedAt: at}}
	sp := SessionPage(sessions, 1, func(s host.Session) int64 { return s.CreatedAt.UnixMilli() })
	if n, id, err := DecodeCursor(sp.NextCursor); len(sp.Sessions) != 1 || n != at.UnixMilli() || id != "a" || err != nil {
		t.Fatalf("SessionPage: %+v (%d %q %v)", sp, n, id, err)
	}
	trees := []host.TreeSession{{Session: host.Session{ID: "a"}, Tombstone: &host.Tombstone{DeletedAt: at}}}
	if dp := DeletedPage(trees, 1, func(tb host.Tombstone) int64 { return tb.DeletedAt.UnixMilli() }); len(dp.Sessions) != 1 || dp.NextCursor != "" {
		t.Fatalf("DeletedPage: %+v", dp)
	}
}

// fakeRows is a result of n rows whose values are their index.
type fakeRows struct {
	n, i int
	err  error
}

func (r *fakeRows) Next() bool { r.i++; return r.i <= r.n }
func (r *fakeRows) Err() error { return r.err }
func (r *fakeRows) Scan(dest ...any) error {
	*dest[0].(*int) = r.i
	return nil
}

func TestCollect(t *testing.T) {
	scan := func(s Scanner) (int, error) {
		var v int
		err := s.Scan(&v)
		return v, err
	}
	got, err := Collect(&fakeRows{n: 0}, scan)
	if err != nil || got == nil || len(got) != 0 {
		t.Fatalf("no rows: %#v %v; want an empty, non-nil slice", got, err)
	}
	if got, err := Collect(&fakeRows{n: 3}, scan); err != nil || !slices.Equal(got, []int{1, 2, 3}) {
		t.Fatalf("three rows: %v %v", got, err)
	}
	boom := errors.New("boom")
	if _, err := Collect(&fakeRows{n: 1, err: boom}, scan); !errors.Is(err, boom) {
		t.Fatalf("rows error: %v", err)
	}
}

func ptr(s string) *string { return &s }
