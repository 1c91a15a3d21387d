package host

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// deltaBound is an upper bound on the encoding of any delta of appends,
// whatever its strings escape to and however wide its numbers and times;
// deltaFits answers exactly what measuring the encoding answers.
func TestDeltaBoundCoversTheEncoding(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 36))
	pieces := []string{"a", "word ", "\x00", "\x1f", "\n", "<", ">", "&", `"`, `\`, "\xff", "\u2028", "😀", "中", "é"}
	str := func(n int) string {
		var b strings.Builder
		for range n {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		return b.String()
	}
	ints := []int64{0, 1, -1, math.MaxInt64, math.MinInt64}
	num := func() int64 {
		if rng.IntN(2) == 0 {
			return ints[rng.IntN(len(ints))]
		}
		return rng.Int64()
	}
	zone := time.FixedZone("odd", -(12*3600 + 34*60 + 56))
	stamp := func() time.Time {
		switch rng.IntN(4) {
		case 0:
			return time.Time{}
		case 1:
			return time.Date(9999, 12, 31, 23, 59, 59, 123456789, zone)
		default:
			return time.Unix(rng.Int64N(1<<33), rng.Int64N(1e9)).In(zone)
		}
	}
	for i := range 3000 {
		d := TranscriptDelta{FromVersion: num(), ToVersion: num(), At: stamp()}
		for range 1 + rng.IntN(4) {
			text := str(rng.IntN(8))
			if i%10 == 0 { // around MaxDeltaBytes, where the bound and the encoding part
				text = str(2000 + rng.IntN(6000))
			}
			d.Messages = append(d.Messages, MessageChange{ID: str(rng.IntN(40)), TurnID: str(rng.IntN(40)),
				Version: num(), Offset: int(num()), Text: text, Done: rng.IntN(2) == 0, UpdatedAt: stamp()})
		}
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		n, ok := deltaBound(d)
		if !ok {
			t.Fatalf("delta %d: no bound for a delta of appends", i)
		}
		if len(b) > n {
			t.Fatalf("delta %d encodes to %d bytes, over its bound %d: %s", i, len(b), n, b)
		}
		if got, want := deltaFits(d), len(b) <= MaxDeltaBytes; got != want {
			t.Fatalf("delta %d (%d bytes): deltaFits %v, want %v", i, len(b), got, want)
		}
	}
}

// Deltas the bound does not cover are measured: a whole message, tool
// state, and a time that does not encode (which cannot be carried).
func TestDeltaFitsMeasuresWhatTheBoundDoesNotCover(t *testing.T) {
	at := time.Date(2026, 12, 5, 4, 0, 0, 0, time.UTC)
	big := strings.Repeat("x", MaxDeltaBytes)
	cases := []struct {
		name string
		d    TranscriptDelta
		want bool
	}{
		{"small message", TranscriptDelta{At: at, Messages: []MessageChange{{Message: &Message{ID: "m", Content: MessageContent{Text: "hi"}}}}}, true},
		{"large message", TranscriptDelta{At: at, Messages: []MessageChange{{Message: &Message{ID: "m", Content: MessageContent{Text: big}}}}}, false},
		{"large tool", TranscriptDelta{At: at, Messages: []MessageChange{{ID: "m", Tool: &ToolCall{ID: "t", Output: big}}}}, false},
		{"small tool", TranscriptDelta{At: at, Messages: []MessageChange{{ID: "m", Tool: &ToolCall{ID: "t", Output: "ok"}}}}, true},
		{"year 10000", TranscriptDelta{At: at.AddDate(8000, 0, 0), Messages: []MessageChange{{ID: "m", Text: "a"}}}, false},
	}
	for _, c := range cases {
		if _, ok := deltaBound(c.d); ok {
			t.Errorf("%s: bounded, want measured", c.name)
		}
		if got := deltaFits(c.d); got != c.want {
			t.Errorf("%s: deltaFits %v, want %v", c.name, got, c.want)
		}
	}
}

// The bound holds, with little to spare, for the widest deltas: every
// string byte escaped to six, every number and time at its widest.
func TestDeltaBoundIsTightForTheWidestDelta(t *testing.T) {
	widest := time.Date(9999, 12, 31, 23, 59, 59, 123456789, time.FixedZone("w", -(12*3600+34*60)))
	for changes := range 5 {
		for _, size := range []int{0, 1, 20, 60} {
			esc := strings.Repeat("\x00", size)
			d := TranscriptDelta{FromVersion: math.MinInt64, ToVersion: math.MinInt64, At: widest}
			for range changes {
				d.Messages = append(d.Messages, MessageChange{ID: esc, TurnID: esc, Version: math.MinInt64,
					Offset: math.MinInt, Text: esc, Done: true, UpdatedAt: widest})
			}
			b, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			n, ok := deltaBound(d)
			if !ok || len(b) > n {
				t.Fatalf("%d changes of %d escaped bytes each: %d encoded bytes, bound %d (%v)", changes, 3*size, len(b), n, ok)
			}
			if spare := n - len(b); spare > 64*(changes+1) {
				t.Errorf("%d changes of %d escaped bytes each: bound %d leaves %d bytes spare over %d", changes, 3*size, n, spare, len(b))
			}
		}
	}
}
