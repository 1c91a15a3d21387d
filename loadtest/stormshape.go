package loadtest

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// The storm's shape: which session each client watches. Issue 17's premise
// is tens of thousands of browser tabs per replica, most of them idle; the
// first storm put every client on a session streaming without pause.
// --storm-streaming-share keeps that shape at 1 (the default) and puts the
// rest of the clients on sessions that exist, have a history, and stay
// quiet while the streaming ones go on.

// stormSeat is one storm client's place.
type stormSeat struct {
	streaming bool
	// session indexes the storm's sessions: the streaming ones first, then
	// the idle ones.
	session int
}

// stormSeats places n clients: client i is on replica A when i is even, on
// B when odd, so the two clients of a pair (2k, 2k+1) share a class and
// each replica holds the same share of streaming watchers. share of the
// pairs watch the nStream streaming sessions (spread evenly over the run,
// not bunched at the start), the rest the nIdle idle sessions; each class
// goes round-robin over its sessions. At share 1 this is the first storm's
// placement, client i on session i mod nStream.
func stormSeats(n int, share float64, nStream, nIdle int) []stormSeat {
	// Parts per million in integers: float steps such as 0.29·100 land
	// just below the integer and would shift a pair.
	ppm := int64(math.Round(share * 1e6))
	seats := make([]stormSeat, n)
	var ks, ki int
	for i := range seats {
		p := int64(i / 2)
		if (p+1)*ppm/1e6 > p*ppm/1e6 || nIdle == 0 {
			seats[i] = stormSeat{streaming: true, session: ks % nStream}
			ks++
			continue
		}
		seats[i] = stormSeat{session: nStream + ki%nIdle}
		ki++
	}
	return seats
}

// stormClass is what one class of storm clients (streaming or idle
// watchers) did: the moved ones' resyncs, the staying ones' deliveries.
type stormClass struct {
	name          string
	clients       int
	moved, stayed int
	lat           *Latency
	tl            *Timeline
	lastNs        atomic.Int64 // signal → this class's last resync

	resynced, recovered, snapshots, unresynced atomic.Int64
	withPosition                               atomic.Int64 // moved clients that resumed from a durable {epoch, version}

	gaps, dups, epochs, behind int64
	stayEvents                 int64 // events the staying clients received during the storm
}

func newStormClasses(seats []stormSeat) [2]*stormClass {
	cl := [2]*stormClass{
		{name: "idle watchers", lat: NewLatency(), tl: NewTimeline()},
		{name: "streaming watchers", lat: NewLatency(), tl: NewTimeline()},
	}
	for i, s := range seats {
		c := cl[classIndex(s.streaming)]
		c.clients++
		if i%2 == 0 {
			c.moved++
		} else {
			c.stayed++
		}
	}
	return cl
}

func classIndex(streaming bool) int {
	if streaming {
		return 1
	}
	return 0
}

// resync records one moved client's resync d after the signal.
func (c *stormClass) resync(d time.Duration, recovered bool) {
	c.lat.Record(d)
	c.tl.Add(1)
	c.resynced.Add(1)
	if recovered {
		c.recovered.Add(1)
	} else {
		c.snapshots.Add(1)
	}
	for {
		last := c.lastNs.Load()
		if int64(d) <= last || c.lastNs.CompareAndSwap(last, int64(d)) {
			return
		}
	}
}

// report adds the class's rows to res: a latency series (the per-class
// table's p50/p99/max), the time until its last mover resynced, and its
// counts, each named after the class.
func (c *stormClass) report(res *Result, allSecs float64) {
	if c.clients == 0 {
		return
	}
	res.series("signal → resynced: "+c.name, false, c.lat, c.tl, allSecs, "resyncs")
	res.figure(c.name+": time until every moved one resynced", float64(c.lastNs.Load())/1e9, "s")
	frac := 0.0
	if c.moved > 0 {
		frac = float64(c.recovered.Load()) / float64(c.moved)
	}
	res.figure(c.name+": recovered:true fraction", frac, "")
	for _, kv := range []KV{
		{"clients", c.clients}, {"moved", c.moved}, {"resynced", c.resynced.Load()},
		{"recovered:true", c.recovered.Load()}, {"snapshot", c.snapshots.Load()},
		{"never resynced", c.unresynced.Load()}, {"resumed from a durable position", c.withPosition.Load()},
		{"gaps", c.gaps}, {"duplicates", c.dups}, {"epoch changes", c.epochs},
		{"moved clients not at the survivor's last seq", c.behind},
		{"events to staying clients during the storm", c.stayEvents},
	} {
		res.count(fmt.Sprintf("%s: %s", c.name, kv.Name), kv.Value)
	}
}
