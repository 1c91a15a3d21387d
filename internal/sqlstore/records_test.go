package sqlstore

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ensemble-dev/ensemble/host"
)

var errNoRows = errors.New("no rows")

var testDialect = Dialect{Name: "test", NoRows: errNoRows,
	Classify: func(op string, err error) error { return fmt.Errorf("test: %s: %w", op, err) }}

type rowFunc func(dest ...any) error

func (f rowFunc) Scan(dest ...any) error { return f(dest...) }

func TestOne(t *testing.T) {
	scan := func(s Scanner) (string, error) {
		var v string
		err := s.Scan(&v)
		return v, err
	}
	v, err := One(testDialect, rowFunc(func(d ...any) error { *d[0].(*string) = "x"; return nil }), scan, "thing x", "get thing")
	if err != nil || v != "x" {
		t.Fatalf("One: %q %v", v, err)
	}
	_, err = One(testDialect, rowFunc(func(...any) error { return errNoRows }), scan, "thing x", "get thing")
	if !errors.Is(err, host.ErrNotFound) || err.Error() != "test: thing x: "+host.ErrNotFound.Error() {
		t.Fatalf("no row: %v, want a not-found naming the store and the thing", err)
	}
	boom := errors.New("boom")
	_, err = One(testDialect, rowFunc(func(...any) error { return boom }), scan, "thing x", "get thing")
	if !errors.Is(err, boom) || errors.Is(err, host.ErrNotFound) || err.Error() != "test: get thing: boom" {
		t.Fatalf("failure: %v, want it classified", err)
	}
	if err := testDialect.Duplicate("claim c"); !errors.Is(err, host.ErrDuplicate) {
		t.Fatalf("Duplicate: %v", err)
	}
}

// docRows is a result of (workspace, key, document) rows.
type docRows struct {
	docs [][3]string
	i    int
}

func (r *docRows) Next() bool { r.i++; return r.i <= len(r.docs) }
func (r *docRows) Err() error { return nil }
func (r *docRows) Scan(dest ...any) error {
	for i, v := range r.docs[r.i-1] {
		*dest[i].(*string) = v
	}
	return nil
}

func TestJSONRecordsQuarantinesWhatDoesNotDecode(t *testing.T) {
	rows := &docRows{docs: [][3]string{
		{"w", "s1", `{"workspace":"w","sessionId":"s1"}`},
		{"w", "s2", `{`},
		{"w", "s3", `{"workspace":"w","sessionId":"other"}`},
	}}
	d, err := JSONRecords(host.QuarantineKindGoal, DecodeGoal)(rows)
	if err != nil || len(d.Records) != 1 || d.Records[0].SessionID != "s1" {
		t.Fatalf("records: %+v %v", d.Records, err)
	}
	if len(d.Bad) != 2 || d.Bad[0].Key != "w/s2" || d.Bad[1].Key != "w/s3" || d.Bad[0].Kind != host.QuarantineKindGoal {
		t.Fatalf("quarantine candidates: %+v", d.Bad)
	}
}

func TestDecodableSeparatesDecodeErrorsFromFailures(t *testing.T) {
	scan := func(s Scanner) (host.Turn, error) {
		var id string
		if err := s.Scan(&id, new(string), new(string)); err != nil {
			return host.Turn{}, err
		}
		tu := host.Turn{WorkspaceID: "w", SessionID: "s", ID: id}
		if id == "bad" {
			return tu, &DecodeError{What: "turn", Err: errors.New("invalid")}
		}
		return tu, nil
	}
	key := func(tu host.Turn) (string, string) { return tu.WorkspaceID, TurnRef(tu).Key() }
	d, err := Decodable(scan, "turn", key)(&docRows{docs: [][3]string{{"ok"}, {"bad"}}})
	if err != nil || len(d.Records) != 1 || len(d.Bad) != 1 || d.Bad[0].Key != "w/s/bad" {
		t.Fatalf("Decodable: %+v %v", d, err)
	}
	boom := errors.New("boom")
	failing := func(Scanner) (host.Turn, error) { return host.Turn{}, boom }
	if _, err := Decodable(failing, "turn", key)(&docRows{docs: [][3]string{{"x"}}}); !errors.Is(err, boom) {
		t.Fatalf("a scan failure must end the scan: %v", err)
	}
}
