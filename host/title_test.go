package host

import (
	"strings"
	"testing"
)

func TestDerivedTitle(t *testing.T) {
	cases := []struct {
		content MessageContent
		want    string
	}{
		{MessageContent{Text: "Fix the login bug"}, "Fix the login bug"},
		{MessageContent{Text: "/sim words=3"}, ""},
		{MessageContent{Text: "/sim tool\n\n   Refactor   the   parser \nrest"}, "Refactor the parser"},
		{MessageContent{Text: "model text", DisplayText: "What the user typed"}, "What the user typed"},
		{MessageContent{Text: strings.Repeat("word ", 40)}, strings.TrimSpace(strings.Repeat("word ", 16)) + "…"},
	}
	for _, c := range cases {
		got := derivedTitle(c.content)
		if got != c.want {
			t.Errorf("derivedTitle(%q) = %q, want %q", c.content.Text, got, c.want)
		}
		if n := len([]rune(got)); n > maxTitleRunes {
			t.Errorf("title has %d runes", n)
		}
	}
}

func TestApplyDerivedTitleNeverOverwrites(t *testing.T) {
	s := Session{Title: "Explicit", TitleExplicit: true}
	applyDerivedTitle(&s, MessageContent{Text: "New prompt"})
	if s.Title != "Explicit" {
		t.Fatalf("explicit title overwritten: %q", s.Title)
	}
	s = Session{Title: "Established"}
	applyDerivedTitle(&s, MessageContent{Text: "New prompt"})
	if s.Title != "Established" {
		t.Fatalf("established title overwritten: %q", s.Title)
	}
}

func TestContentNormalizeAndDigest(t *testing.T) {
	a, err := MessageContent{Text: "hi", Attachments: []AttachmentRef{}}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := MessageContent{Text: "hi"}.Normalize()
	if a.Digest() != b.Digest() {
		t.Fatal("empty and nil slices must normalize to the same digest")
	}
	c, _ := MessageContent{Text: "hi", Quotes: []Quote{{Text: "q"}}}.Normalize()
	if c.Digest() == b.Digest() {
		t.Fatal("quotes are part of the canonical content")
	}
	bad := []MessageContent{
		{Text: ""},
		{Text: "  \n"},
		{Text: string([]byte{0xff})},
		{Text: strings.Repeat("x", MaxContentBytes+1)},
		{Text: "x", Attachments: []AttachmentRef{{Name: "no id"}}},
		{Text: "x", Quotes: []Quote{{MessageID: "m"}}},
		{Text: "nul\x00inside"},
		{Text: "x", DisplayText: "nul\x00"},
		{Text: "x", Quotes: []Quote{{Text: "q\x00"}}},
	}
	for i, m := range bad {
		if _, err := m.Normalize(); CodeOf(err) != CodeInvalidInput {
			t.Errorf("case %d: want invalid_input, got %v", i, err)
		}
	}
}

func TestTitleRejectsNUL(t *testing.T) {
	if _, err := normalizeTitle("a\x00b"); CodeOf(err) != CodeInvalidInput {
		t.Fatalf("want invalid_input, got %v", err)
	}
}

func TestCodeOf(t *testing.T) {
	if CodeOf(ErrNotFound) != CodeNotFound || CodeOf(ErrUnavailable) != CodeUnavailable {
		t.Fatal("sentinels map to codes")
	}
	if CodeOf(Errorf(CodeSessionBusy, "x")) != CodeSessionBusy || !CodeSessionBusy.Retryable() || CodeInvalidInput.Retryable() {
		t.Fatal("typed errors keep their code")
	}
	if err := storeErr(ErrDuplicate, "x"); CodeOf(err) != CodeInternal {
		t.Fatalf("an unexpected duplicate is internal, got %v", err)
	}
}
