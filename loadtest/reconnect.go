package loadtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ensemble-dev/ensemble/auth"
)

// backoff is full-jitter exponential backoff: attempt k waits a uniformly
// random time in [0, min(cap, base·2^k)).
func backoff(attempt int, base, cap time.Duration) time.Duration {
	d := cap
	if attempt < 30 && base<<attempt < cap {
		d = base << attempt
	}
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}

// moveTo reconnects one client to addr and resubscribes it to session sid
// from st, the position it last applied: it waits wait, then the backoff
// between attempts, until a subscribe answers (the new client and the
// answer) or ctx ends (a nil client). Every failed attempt goes to failed;
// deferred, if not nil, counts the subscribes the server deferred with
// retryAfterMs.
func (r *runner) moveTo(ctx context.Context, addr, token, ws, sid string, st SubState, wait time.Duration,
	failed func(error), deferred *atomic.Int64) (*Client, SubscribeResult) {
	var rs *Resume
	if st.Epoch != "" || st.Position != nil {
		rs = &Resume{Epoch: st.Epoch, Seq: st.Seq, Position: st.Position}
	}
	for attempt := 1; ; attempt++ {
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, SubscribeResult{}
		}
		wait = backoff(attempt, r.cfg.BackoffBase, r.cfg.BackoffCap)
		cl, err := Dial(ctx, addr, token, DialOptions{})
		if err != nil {
			failed(err)
			continue
		}
		sr, err := cl.Subscribe(ctx, ws, sid, rs)
		if deferred != nil {
			deferred.Add(cl.Deferred.Load())
		}
		if err != nil {
			cl.Drop()
			failed(err)
			continue
		}
		return cl, sr
	}
}

// reconnect: C subscribed clients drop at once while sessions stream, then
// reconnect with full-jitter backoff and resume from their last applied
// event's durable position. With several replicas each client comes back
// on the next replica (a load balancer moved it), so the resume is served
// from that replica's window or the store, not from the ring that served
// it. Measures the time from the drop until each is resynced, and
// checks that no event was skipped or seen twice across the reconnect and
// that every client ends at its replica's last seq.
func (r *runner) reconnect(ctx context.Context) *Result {
	c := r.cfg
	res := &Result{Name: "reconnect"}
	n := c.ReconnectClients
	nSess := min(10, n)
	res.param("clients", n)
	res.param("replicas", len(r.addrs))
	res.param("sessions", nSess)
	res.param("backoff", fmt.Sprintf("full jitter, base %s, cap %s", c.BackoffBase, c.BackoffCap))
	var phase atomic.Value
	phase.Store("connecting")
	var connected, resynced, failures atomic.Int64
	r.progress.set(func() string {
		return fmt.Sprintf("reconnect %s: %d connected, %d/%d resynced, %d failed attempts", phase.Load(), connected.Load(), resynced.Load(), n, failures.Load())
	})
	ws := r.workspace("rc", 0)
	viewer := r.token("lt-reconnect", auth.RoleViewer, ws)

	var drivers []*driver
	var sids []string
	defer func() {
		for _, d := range drivers {
			d.c.Close()
		}
	}()
	for k := range nSess {
		d, err := newDriver(ctx, r.addr(k), r.token("lt-driver", auth.RoleMember, ws))
		if err != nil {
			res.Skipped = "driver: " + err.Error()
			return res
		}
		drivers = append(drivers, d)
		sid, err := d.createSession(ctx, ws)
		if err != nil {
			res.Skipped = err.Error()
			return res
		}
		sids = append(sids, sid)
	}
	// One observer per replica and session that never disconnects: the
	// seq every client must end at.
	observers := map[[2]int]*Client{}
	for x := range r.addrs {
		for k, sid := range sids {
			o, err := Dial(ctx, r.addrs[x], viewer, DialOptions{})
			if err == nil {
				_, err = o.Subscribe(ctx, ws, sid, nil)
			}
			if err != nil {
				res.Skipped = "observer: " + err.Error()
				return res
			}
			defer o.Drop()
			observers[[2]int{x, k}] = o
		}
	}
	first, err := dialMany(ctx, n, 32, &connected, func(ctx context.Context, i int) (*Client, error) {
		cl, err := Dial(ctx, r.addr(i), viewer, DialOptions{})
		if err != nil {
			return nil, err
		}
		if _, err := cl.Subscribe(ctx, ws, sids[i%nSess], nil); err != nil {
			cl.Drop()
			return nil, err
		}
		return cl, nil
	})
	if err != nil {
		for _, cl := range first {
			if cl != nil {
				cl.Drop()
			}
		}
		res.Skipped = "clients could not connect: " + err.Error()
		return res
	}

	// Stream on every session while the clients drop and come back.
	phase.Store("streaming")
	var stop atomic.Bool
	var streamWG sync.WaitGroup
	var turns atomic.Int64
	for k, d := range drivers {
		streamWG.Add(1)
		go func() {
			defer streamWG.Done()
			for m := 0; !stop.Load() && ctx.Err() == nil; m++ {
				tctx, cancel := context.WithTimeout(ctx, time.Duration(c.Words)*c.Rate*4+30*time.Second)
				tid, err := d.submit(tctx, ws, sids[k], fmt.Sprintf("lt-%s-rc-%d-%d", r.id, k, m),
					fmt.Sprintf("/sim words=%d rate=%s\nreconnect load %d", min(c.Words, 40), c.Rate, m))
				if err == nil {
					err = d.wait(tctx, tid)
				}
				cancel()
				if err != nil {
					time.Sleep(50 * time.Millisecond)
					continue
				}
				turns.Add(1)
			}
		}()
	}
	time.Sleep(2 * time.Second)

	// Drop everyone at once; each client then reads its resume point
	// (the last event it applied) and reconnects on its own.
	phase.Store("reconnecting")
	type point struct {
		name string
		st   SubState
	}
	resume := make([]point, n)
	lat := NewLatency()
	tl := NewTimeline()
	var recovered, snapshots, unresynced atomic.Int64
	second := make([]*Client, n)
	t0 := time.Now()
	for _, cl := range first {
		cl.Drop()
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-first[i].Done()
			name := "session:" + ws + "/" + sids[i%nSess]
			st, _ := first[i].Sub(name)
			resume[i] = point{name, st}
			cl, sr := r.moveTo(rctx, r.addr(i+1), viewer, ws, sids[i%nSess], st, backoff(0, c.BackoffBase, c.BackoffCap),
				func(error) { failures.Add(1) }, nil)
			if cl == nil {
				unresynced.Add(1)
				return
			}
			lat.Record(time.Since(t0))
			tl.Add(1)
			resynced.Add(1)
			if sr.Recovered {
				recovered.Add(1)
			} else {
				snapshots.Add(1)
			}
			second[i] = cl
		}()
	}
	wg.Wait()
	cancel()
	allSecs := time.Since(t0).Seconds()

	// Let the streams finish and every client catch up, then compare.
	phase.Store("settling")
	stop.Store(true)
	streamWG.Wait()
	time.Sleep(time.Second)
	var behind, gaps, dups, epochs int64
	for _, cl := range first {
		gaps += cl.Gaps.Load()
		dups += cl.Duplicates.Load()
		epochs += cl.EpochMoves.Load()
	}
	for i, cl := range second {
		if cl == nil {
			continue
		}
		gaps += cl.Gaps.Load()
		dups += cl.Duplicates.Load()
		epochs += cl.EpochMoves.Load()
		want, _ := observers[[2]int{(i + 1) % len(r.addrs), i % nSess}].Sub(resume[i].name)
		got, _ := cl.Sub(resume[i].name)
		if got.Epoch != want.Epoch || got.Seq != want.Seq {
			behind++
		}
		cl.Drop()
	}
	res.Seconds = allSecs
	ens := res.series("Ensemble drop → resynced (resume)", false, lat, tl, allSecs, "resyncs")
	res.figure("time until all resynced", allSecs, "s")
	res.count("resynced", resynced.Load())
	res.count("resumed without snapshot", recovered.Load())
	res.count("resynced from a snapshot", snapshots.Load())
	res.count("never resynced", unresynced.Load())
	res.count("failed attempts (retried)", failures.Load())
	res.count("gaps", gaps)
	res.count("duplicates", dups)
	res.count("epoch changes", epochs)
	res.count("clients not at the replica's last seq", behind)
	res.count("turns streamed meanwhile", turns.Load())
	res.check("all resynced", resynced.Load() == int64(n), "%d of %d", resynced.Load(), n)
	res.check("zero gaps and duplicates", gaps == 0 && dups == 0 && epochs == 0, "%d gaps, %d duplicates, %d epoch changes", gaps, dups, epochs)
	res.check("every client ends at its replica's last seq", behind == 0, "%d behind", behind)
	res.Targets = append(res.Targets, Target{Name: "reconnect", Goal: "2,000 clients resynced with zero gaps and zero duplicates",
		Measured: fmt.Sprintf("%d clients, %d resynced in %.2f s, %d gaps, %d duplicates", n, resynced.Load(), allSecs, gaps, dups),
		Met:      n >= 2000 && resynced.Load() == int64(n) && gaps == 0 && dups == 0 && behind == 0})

	if r.ref != nil {
		phase.Store("reference")
		if refLat, refTL, secs, ok := r.refReconnect(ctx, n, nSess, &connected, res); ok {
			ref := res.series("bare server drop → resubscribed", true, refLat, refTL, secs, "resyncs")
			res.figure("bare server: time until all resubscribed", secs, "s")
			res.ratio("p50 drop → resynced", ens.Latency.P50, ref.Latency.P50, "ms", "bare server, same backoff")
			res.ratio("p99 drop → resynced", ens.Latency.P99, ref.Latency.P99, "ms", "bare server, same backoff")
			res.ratio("time until all resynced", allSecs, secs, "s", "bare server, same backoff")
		}
	}
	res.note("The drop is client-side (every socket closed at once without a close handshake, as a network failure looks); the server keeps running. Clients resume from their durable position (epoch, message version), on the next replica when there are several; 'resumed without snapshot' counts recovered:true answers. The backoff spreads the herd over about [0, base) on the first attempt; the figures include that wait.")
	return res
}

// refReconnect: the same herd against the bare server (connect and
// subscribe, no auth and no resume).
func (r *runner) refReconnect(ctx context.Context, n, nSess int, connected *atomic.Int64, res *Result) (*Latency, *Timeline, float64, bool) {
	c := r.cfg
	var g, d atomic.Int64
	topic := func(i int) string { return fmt.Sprintf("rc-%s-%d", r.id, i%nSess) }
	connected.Store(0)
	first, err := dialMany(ctx, n, 32, connected, func(ctx context.Context, i int) (*refClient, error) {
		return dialRef(ctx, r.ref.Addr, topic(i), &g, &d, nil)
	})
	if err != nil {
		for _, cl := range first {
			if cl != nil {
				cl.ws.CloseNow()
			}
		}
		res.note("reference reconnect: %v", err)
		return nil, nil, 0, false
	}
	lat := NewLatency()
	tl := NewTimeline()
	t0 := time.Now()
	for _, cl := range first {
		cl.ws.CloseNow()
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var okN atomic.Int64
	second := make([]*refClient, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for attempt := 0; ; attempt++ {
				select {
				case <-time.After(backoff(attempt, c.BackoffBase, c.BackoffCap)):
				case <-rctx.Done():
					return
				}
				cl, err := dialRef(rctx, r.ref.Addr, topic(i), &g, &d, nil)
				if err != nil {
					continue
				}
				lat.Record(time.Since(t0))
				tl.Add(1)
				okN.Add(1)
				second[i] = cl
				return
			}
		}()
	}
	wg.Wait()
	secs := time.Since(t0).Seconds()
	for _, cl := range second {
		if cl != nil {
			cl.ws.CloseNow()
		}
	}
	res.count("reference resubscribed", okN.Load())
	return lat, tl, secs, okN.Load() == int64(n)
}
