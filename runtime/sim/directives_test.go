package sim

import (
	"strings"
	"testing"
	"time"
)

func TestParseDirectives(t *testing.T) {
	d, rest, ok := parseDirectives("/sim words=200 rate=5ms tool think bogus\nthe actual prompt\nline two")
	if !ok {
		t.Fatal("no directives found")
	}
	if d.words != 200 || d.rate != 5*time.Millisecond || !d.tool || !d.think || d.fail || d.hang {
		t.Errorf("directives = %+v", d)
	}
	if strings.Join(d.unknown, ",") != "bogus" {
		t.Errorf("unknown = %v", d.unknown)
	}
	if rest != "the actual prompt\nline two" {
		t.Errorf("rest = %q", rest)
	}
	if d, _, _ := parseDirectives("/sim instant error-after=3 words=x"); d.rate >= 0 || d.errorAfter != 3 || d.words != 0 || len(d.unknown) != 1 {
		t.Errorf("directives = %+v", d)
	}
	for _, text := range []string{"hello /sim tool", "/simulate this", "", "tell me\n/sim tool"} {
		if _, rest, ok := parseDirectives(text); ok || rest != text {
			t.Errorf("parseDirectives(%q) = ok %v rest %q", text, ok, rest)
		}
	}
}

func TestScriptPlacesToolBetweenText(t *testing.T) {
	d, rest, _ := parseDirectives("/sim tool permission crash\nhi")
	var kinds []string
	for _, s := range d.script(rest, true) {
		switch {
		case s.Text != "":
			kinds = append(kinds, "text")
		case s.Tool != nil:
			kinds = append(kinds, "tool")
		case s.Permission != nil:
			kinds = append(kinds, "permission")
		case s.Crash:
			kinds = append(kinds, "crash")
		}
	}
	if got := strings.Join(kinds, " "); got != "text tool text permission text crash" {
		t.Errorf("script = %s", got)
	}
	if fail := (directives{fail: true}).script("x", false); len(fail) != 1 || fail[0].Fail == "" {
		t.Errorf("fail script = %+v", fail)
	}
}

func TestSplitKeepSpace(t *testing.T) {
	for _, s := range []string{"", "one", "  lead and trail  ", "a\n\nb\tc", "Hello! I'm here."} {
		if got := strings.Join(splitKeepSpace(s), ""); got != s {
			t.Errorf("splitKeepSpace(%q) rejoins to %q", s, got)
		}
	}
	if n := len(splitKeepSpace("  a b\n c ")); n != 3 {
		t.Errorf("3 words split into %d parts", n)
	}
}

func TestSplitAnswerPrefersSentenceEnds(t *testing.T) {
	head, tail := splitAnswer("One two three. Four five six seven. Eight nine.")
	if head != "One two three." || tail != "Four five six seven. Eight nine." {
		t.Errorf("split = %q | %q", head, tail)
	}
	head, tail = splitAnswer("no sentence ends here at all")
	if head != "no sentence ends" || tail != "here at all" {
		t.Errorf("split = %q | %q", head, tail)
	}
}

func TestLongAnswerHasExactWordCount(t *testing.T) {
	for _, n := range []int{1, 11, 12, 13, 500} {
		if got := len(strings.Fields(longAnswer(n))); got != n {
			t.Errorf("longAnswer(%d) has %d words", n, got)
		}
	}
}

func TestDeafDirectiveMatchesOnlyASimLine(t *testing.T) {
	for text, want := range map[string]bool{
		`{"type":"text","text":"/sim permission deaf"}`:      true,
		`{"type":"text","text":"  /sim deaf\nrest"}`:         true,
		`{"type":"text","text":"/sim permission deafening"}`: false,
		`{"type":"text","text":"please be deaf"}`:            false,
		`{"type":"text","text":"/sim permission"}`:           false,
	} {
		if got := deafDirective.MatchString(text); got != want {
			t.Errorf("%s: match %v, want %v", text, got, want)
		}
	}
}

func TestGoalDirectives(t *testing.T) {
	d, rest, ok := parseDirectives("/sim instant goal-after=2 goal-hang-from=3 goal-set=write-the-docs\n[goal turn 3 of 5 · revision 1 · goal_continuation]\nObjective: x")
	if !ok || len(d.unknown) != 0 || d.goal.after != 2 || d.goal.hangFrom != 3 || d.goal.set != "write the docs" {
		t.Fatalf("parsed %+v (unknown %v)", d.goal, d.unknown)
	}
	steps := d.goal.steps(rest)
	var statuses []string
	hang := false
	for _, s := range steps {
		if s.Goal != nil {
			statuses = append(statuses, s.Goal.Status)
		}
		hang = hang || s.Hang
	}
	if len(statuses) != 2 || statuses[0] != "set" || statuses[1] != "achieved" || !hang {
		t.Fatalf("goal turn 3 steps: %v hang=%v", statuses, hang)
	}
	// Not a goal turn: only the provider-set goal.
	if steps := d.goal.steps("plain prompt"); len(steps) != 2 || steps[1].Goal.Status != "set" {
		t.Fatalf("plain prompt steps: %+v", steps)
	}
	// Turn 1 of an unfinished goal: continue, no hang.
	d2, rest2, _ := parseDirectives("/sim goal-after=2 goal-hang-from=3\n[goal turn 1 of 5 · revision 1 · goal_arm]")
	if steps := d2.goal.steps(rest2); len(steps) != 2 || steps[1].Goal.Status != "continue" {
		t.Fatalf("turn 1 steps: %+v", steps)
	}
	for _, bad := range []string{"goal-after=0", "goal-after=x", "goal-hang-from=-1", "goal-set="} {
		if d, _, _ := parseDirectives("/sim " + bad); len(d.unknown) != 1 {
			t.Errorf("%s accepted", bad)
		}
	}
}
