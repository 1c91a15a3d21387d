package loadtest

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ensemble-dev/ensemble/auth"
)

// submit: durable submits per second with the sim answering instantly, at
// several concurrencies. A submit is one turn.message.submit answered ok
// (the Host answers once the prompt is durably accepted); each worker owns
// one session and waits for its turn to settle before the next submit (a
// session runs one turn at a time).
func (r *runner) submit(ctx context.Context) *Result {
	c := r.cfg
	res := &Result{Name: "submit"}
	res.param("concurrency", fmt.Sprint(c.SubmitConcurrency))
	res.param("duration per level", c.Duration.String())
	res.param("replicas", len(r.addrs))
	var level, done, failed atomic.Int64
	r.progress.set(func() string {
		return fmt.Sprintf("submit c=%d: %d ok, %d errors", level.Load(), done.Load(), failed.Load())
	})
	ws := r.workspace("s", 0)
	tok := r.token("lt-submitter", auth.RoleMember, ws)
	var best float64
	var total int64
	var totalSecs float64
	for li, conc := range c.SubmitConcurrency {
		if ctx.Err() != nil {
			break
		}
		level.Store(int64(conc))
		done.Store(0)
		failed.Store(0)
		drivers, err := dialMany(ctx, conc, 16, nil, func(ctx context.Context, i int) (*driver, error) {
			return newDriver(ctx, r.addr(i), tok)
		})
		closeAll := func() {
			for _, d := range drivers {
				if d != nil {
					d.c.Close()
				}
			}
		}
		if err != nil {
			closeAll()
			res.note("c=%d: connections failed: %v", conc, err)
			continue
		}
		sids := make([]string, conc)
		for i, d := range drivers {
			if sids[i], err = d.createSession(ctx, ws); err != nil {
				break
			}
		}
		if err != nil {
			closeAll()
			res.note("c=%d: %v", conc, err)
			continue
		}
		lat, turnLat := NewLatency(), NewLatency()
		tl := NewTimeline()
		codes := newCodeCounter()
		start := time.Now()
		deadline := start.Add(c.Duration)
		var wg sync.WaitGroup
		if dir := c.ProfileDir; dir != "" && li == len(c.SubmitConcurrency)-1 && len(r.replicas) > 0 && r.replicas[0].PprofAddr != "" {
			wg.Add(1)
			go func() { // a CPU profile of replica 1 at the highest concurrency
				defer wg.Done()
				r.saveProfile(ctx, r.replicas[0].PprofAddr, fmt.Sprintf("/debug/pprof/profile?seconds=%d", max(1, int(c.Duration/time.Second))),
					filepath.Join(dir, "submit-cpu.pb.gz"), res)
			}()
		}
		for i, d := range drivers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; time.Now().Before(deadline) && ctx.Err() == nil; n++ {
					csid := fmt.Sprintf("lt-%s-s%d-%d-%d", r.id, li, i, n)
					tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
					t0 := time.Now()
					tid, err := d.submit(tctx, ws, sids[i], csid, fmt.Sprintf("/sim instant\nsubmit load %d", n))
					t1 := time.Now()
					if err == nil {
						lat.Record(t1.Sub(t0))
						tl.AddAt(t1, 1)
						done.Add(1)
						err = d.wait(tctx, tid)
						if err == nil {
							turnLat.Record(time.Since(t0))
						}
					}
					cancel()
					if err != nil {
						failed.Add(1)
						codes.add(err)
						if errors.Is(err, ErrClosed) {
							return
						}
						time.Sleep(20 * time.Millisecond)
					}
				}
			}()
		}
		wg.Wait()
		secs := time.Since(start).Seconds()
		closeAll()
		s := res.series(fmt.Sprintf("Ensemble durable submit, c=%d", conc), false, lat, tl, secs, "submits")
		res.series(fmt.Sprintf("Ensemble submit → turn settled, c=%d", conc), false, turnLat, nil, secs, "")
		res.count(fmt.Sprintf("c=%d submits", conc), done.Load())
		res.count(fmt.Sprintf("c=%d errors", conc), failed.Load())
		if e := codes.String(); e != "" {
			res.count(fmt.Sprintf("c=%d error codes", conc), e)
		}
		best = max(best, s.Throughput)
		total += done.Load()
		totalSecs += secs
	}
	res.Seconds = totalSecs
	res.figure("best durable submits/s", best, "submits/s")
	if pg := r.refs["pgbench"]; pg != nil && pg.Value > 0 {
		against := "pgbench -N on this machine's PostgreSQL"
		if r.rep.Setup.Store != "PostgreSQL" {
			against += " (Ensemble ran on SQLite here: a different store, shown for scale)"
		}
		res.ratio("best durable submits/s (higher is better)", best, pg.Value, "/s", against)
	}
	res.note("Each submit is one durable transaction chain (claim, turn, prompt message, outbox; then dispatch and acceptance), so one submit costs several commits; pgbench -N is one short write transaction of three statements.")
	return res
}
