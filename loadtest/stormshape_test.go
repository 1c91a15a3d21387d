package loadtest

import (
	"testing"
	"time"
)

// The premise shape: a share of the clients on the streaming sessions, the
// same share on each replica (even indexes move, odd ones stay), the rest
// spread evenly over the idle sessions.
func TestStormSeatsPutTheShareOnStreamingSessions(t *testing.T) {
	for _, tc := range []struct {
		n             int
		share         float64
		nStream, nIdl int
		wantStreaming int // per replica
	}{
		{10000, 0.1, 10, 10, 500},
		{10000, 0.25, 10, 10, 1250},
		{1000, 0.29, 4, 3, 145},
		{160, 0.25, 4, 3, 20},
	} {
		seats := stormSeats(tc.n, tc.share, tc.nStream, tc.nIdl)
		if len(seats) != tc.n {
			t.Fatalf("%d clients, %d seats", tc.n, len(seats))
		}
		var streaming [2]int
		perSession := map[int]int{}
		for i, s := range seats {
			if s.streaming {
				streaming[i%2]++
				if s.session < 0 || s.session >= tc.nStream {
					t.Fatalf("share %g: streaming client %d on session %d, want < %d", tc.share, i, s.session, tc.nStream)
				}
			} else if s.session < tc.nStream || s.session >= tc.nStream+tc.nIdl {
				t.Fatalf("share %g: idle client %d on session %d, want in [%d, %d)", tc.share, i, s.session, tc.nStream, tc.nStream+tc.nIdl)
			}
			if i%2 == 1 && s.streaming != seats[i-1].streaming {
				t.Fatalf("share %g: pair %d split over the classes", tc.share, i/2)
			}
			perSession[s.session]++
		}
		if streaming[0] != tc.wantStreaming || streaming[1] != tc.wantStreaming {
			t.Errorf("share %g of %d: %d streaming watchers on A, %d on B, want %d each", tc.share, tc.n, streaming[0], streaming[1], tc.wantStreaming)
		}
		// Round-robin within each class: sessions of a class differ by at most one watcher.
		for _, class := range [][2]int{{0, tc.nStream}, {tc.nStream, tc.nStream + tc.nIdl}} {
			lo, hi := tc.n, 0
			for k := class[0]; k < class[1]; k++ {
				lo, hi = min(lo, perSession[k]), max(hi, perSession[k])
			}
			if hi-lo > 1 {
				t.Errorf("share %g: sessions %d..%d hold %d to %d watchers", tc.share, class[0], class[1]-1, lo, hi)
			}
		}
		// Spread over the run, not bunched: the first tenth of the clients
		// holds about a tenth of the streaming watchers.
		early := 0
		for _, s := range seats[:tc.n/10] {
			if s.streaming {
				early++
			}
		}
		if want := 2 * tc.wantStreaming / 10; early < want-2 || early > want+2 {
			t.Errorf("share %g: %d streaming watchers among the first %d clients, want about %d", tc.share, early, tc.n/10, want)
		}
	}
}

// Share 1 is the first storm's shape, unchanged: every client streams,
// client i on session i mod the streaming sessions.
func TestStormSeatsShareOneIsTheFirstShape(t *testing.T) {
	for i, s := range stormSeats(1001, 1, 10, 10) {
		if !s.streaming || s.session != i%10 {
			t.Fatalf("client %d: %+v, want streaming on session %d", i, s, i%10)
		}
	}
}

// The report counts both classes: moved and staying clients, resyncs, and
// the time until each class's last mover resynced.
func TestStormClassesReportBothClasses(t *testing.T) {
	seats := stormSeats(40, 0.25, 2, 3)
	classes := newStormClasses(seats)
	idle, streaming := classes[0], classes[1]
	if streaming.moved != 5 || streaming.stayed != 5 || idle.moved != 15 || idle.stayed != 15 {
		t.Fatalf("streaming %d moved / %d stayed, idle %d / %d; want 5/5 and 15/15",
			streaming.moved, streaming.stayed, idle.moved, idle.stayed)
	}
	streaming.resync(1500*time.Millisecond, true)
	streaming.resync(700*time.Millisecond, false)
	idle.resync(300*time.Millisecond, true)
	idle.withPosition.Add(1)
	res := &Result{}
	for _, k := range classes {
		k.report(res, 2)
	}
	counts := map[string]any{}
	for _, c := range res.Counts {
		counts[c.Name] = c.Value
	}
	for name, want := range map[string]int64{
		"streaming watchers: resynced": 2, "streaming watchers: recovered:true": 1, "streaming watchers: snapshot": 1,
		"idle watchers: resynced": 1, "idle watchers: recovered:true": 1, "idle watchers: resumed from a durable position": 1,
	} {
		if got, ok := counts[name].(int64); !ok || got != want {
			t.Errorf("%s = %v, want %d", name, counts[name], want)
		}
	}
	if counts["idle watchers: moved"] != 15 || counts["streaming watchers: clients"] != 10 {
		t.Errorf("class sizes: %v", counts)
	}
	figs := map[string]float64{}
	for _, f := range res.Figures {
		figs[f.Name] = f.Value
	}
	if figs["streaming watchers: time until every moved one resynced"] != 1.5 || figs["idle watchers: time until every moved one resynced"] != 0.3 {
		t.Errorf("last resync per class: %v", figs)
	}
	if len(res.Series) != 2 || res.Series[0].Latency.Count != 1 || res.Series[1].Latency.Count != 2 {
		t.Errorf("one latency series per class: %+v", res.Series)
	}
	// A class without clients adds nothing (share 1 has no idle watchers).
	res = &Result{}
	newStormClasses(stormSeats(40, 1, 2, 3))[0].report(res, 2)
	if len(res.Counts)+len(res.Figures)+len(res.Series) != 0 {
		t.Errorf("an empty class reported %+v", res)
	}
}
