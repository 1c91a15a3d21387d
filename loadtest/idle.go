package loadtest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ensemble-dev/ensemble/auth"
)

// idle: C authenticated connections, each subscribed to a session topic,
// on one replica. Memory per connection from the server's /metrics before
// and after; CPU while they sit idle.
func (r *runner) idle(ctx context.Context) *Result {
	c := r.cfg
	res := &Result{Name: "idle"}
	addr := r.addrs[0]
	n := c.IdleConns
	nSess := min(10, n)
	res.param("connections", n)
	res.param("sessions subscribed", nSess)
	res.param("idle window", c.IdleWindow.String())
	var connected atomic.Int64
	var phase atomic.Value
	phase.Store("connecting")
	r.progress.set(func() string { return fmt.Sprintf("idle %s: %d/%d connections", phase.Load(), connected.Load(), n) })

	ws := r.workspace("idle", 0)
	d, err := newDriver(ctx, addr, r.token("lt-driver", auth.RoleMember, ws))
	if err != nil {
		res.Skipped = "driver: " + err.Error()
		return res
	}
	var sids []string
	for range nSess {
		sid, err := d.createSession(ctx, ws)
		if err != nil {
			d.c.Close()
			res.Skipped = err.Error()
			return res
		}
		sids = append(sids, sid)
	}
	d.c.Close()
	settle := min(3*time.Second, max(500*time.Millisecond, c.IdleWindow/2))
	time.Sleep(settle) // let the driver's connection go
	before, err := quietMetrics(ctx, addr)
	if err != nil {
		res.Skipped = "cannot read /metrics: " + err.Error()
		return res
	}
	connLat := NewLatency()
	tl := NewTimeline()
	tok := r.token("lt-idle", auth.RoleViewer, ws)
	start := time.Now()
	clients, err := dialMany(ctx, n, 32, &connected, func(ctx context.Context, i int) (*Client, error) {
		t0 := time.Now()
		cl, err := Dial(ctx, addr, tok, DialOptions{})
		if err != nil {
			return nil, err
		}
		if _, err := cl.Subscribe(ctx, ws, sids[i%nSess], nil); err != nil {
			cl.Drop()
			return nil, err
		}
		connLat.Record(time.Since(t0))
		tl.Add(1)
		return cl, nil
	})
	connectSecs := time.Since(start).Seconds()
	defer func() {
		for _, cl := range clients {
			if cl != nil {
				cl.Drop()
			}
		}
	}()
	if err != nil {
		res.Skipped = "connections failed: " + err.Error()
		return res
	}
	phase.Store("settling")
	time.Sleep(settle)
	mid, err := ScrapeMetrics(ctx, addr)
	if err != nil {
		res.Skipped = "cannot read /metrics: " + err.Error()
		return res
	}
	phase.Store("idle")
	var cpuProf sync.WaitGroup
	if dir := r.cfg.ProfileDir; dir != "" && len(r.replicas) > 0 && r.replicas[0].PprofAddr != "" {
		cpuProf.Go(func() { // the CPU the idle connections cost, e.g. heartbeats
			r.saveProfile(ctx, r.replicas[0].PprofAddr, fmt.Sprintf("/debug/pprof/profile?seconds=%d", max(1, int(c.IdleWindow/time.Second))),
				filepath.Join(dir, "idle-cpu.pb.gz"), res)
		})
	}
	select {
	case <-time.After(c.IdleWindow):
	case <-ctx.Done():
	}
	cpuProf.Wait()
	after, err := ScrapeMetrics(ctx, addr)
	if err != nil {
		res.Skipped = "cannot read /metrics: " + err.Error()
		return res
	}
	if dir := r.cfg.ProfileDir; dir != "" && len(r.replicas) > 0 && r.replicas[0].PprofAddr != "" {
		r.saveProfile(ctx, r.replicas[0].PprofAddr, "/debug/pprof/heap", filepath.Join(dir, "idle-heap.pb.gz"), res)
	}
	open := after.Conns - before.Conns
	res.Seconds = c.IdleWindow.Seconds()
	res.series("Ensemble connect + hello + subscribe", false, connLat, tl, connectSecs, "connections")
	rss := (after.RSS - before.RSS) / float64(n)
	heap := (after.HeapInuse - before.HeapInuse) / float64(n)
	cpu := (after.CPUSeconds - mid.CPUSeconds) / c.IdleWindow.Seconds() * 100
	res.figure("RSS growth per connection", rss/1024, "KiB")
	res.figure("Go heap in use per connection", heap/1024, "KiB")
	res.figure("goroutine stacks per connection", (after.StackInuse-before.StackInuse)/float64(n)/1024, "KiB")
	res.figure("goroutines per connection", (after.Goroutines-before.Goroutines)/float64(n), "")
	res.figure("server CPU while idle", cpu, "% of one core")
	res.figure("server RSS with the connections", after.RSS/(1<<20), "MiB")
	res.count("connections open on the server", int64(open))
	res.check("every connection open on the server", int64(open) == int64(n), "%v of %d", open, n)
	res.Targets = append(res.Targets, Target{Name: "idle memory", Goal: "≤ 16 KiB RSS growth per idle subscribed connection",
		Measured: fmt.Sprintf("%.1f KiB RSS, %.1f KiB Go heap", rss/1024, heap/1024), Met: rss <= 16*1024})
	for _, cl := range clients {
		if cl != nil {
			cl.Drop()
		}
	}
	clients = nil

	if r.ref != nil {
		phase.Store("reference")
		if rr, rh, lat, secs, ok := r.refIdle(ctx, n, &connected, res); ok {
			res.series("bare server connect + subscribe", true, lat, nil, secs, "")
			res.figure("bare server RSS growth per connection", rr/1024, "KiB")
			res.figure("bare server Go heap per connection", rh/1024, "KiB")
			res.ratio("RSS per connection", rss, rr, "bytes", "bare coder/websocket server")
			res.ratio("Go heap per connection", heap, rh, "bytes", "bare coder/websocket server")
		}
	}
	res.note("Per connection = (after − before) ÷ connections, read from the server's own /metrics (process_resident_memory_bytes, go_memstats_heap_inuse_bytes) %s after the last connection subscribed; the Go runtime returns memory lazily, so RSS is an upper bound.", (settle + c.IdleWindow).String())
	return res
}

// refIdle opens the same number of idle subscribers on the bare server.
func (r *runner) refIdle(ctx context.Context, n int, connected *atomic.Int64, res *Result) (rss, heap float64, lat *Latency, secs float64, ok bool) {
	if r.ref.PID == os.Getpid() {
		res.note("The reference server runs inside the harness here, so its memory per connection is not measured.")
		return 0, 0, nil, 0, false
	}
	before, err := ScrapeMetrics(ctx, r.ref.Addr)
	if err != nil {
		res.note("reference idle: %v", err)
		return
	}
	var g, d atomic.Int64
	lat = NewLatency()
	connected.Store(0)
	start := time.Now()
	clients, err := dialMany(ctx, n, 32, connected, func(ctx context.Context, i int) (*refClient, error) {
		t0 := time.Now()
		cl, err := dialRef(ctx, r.ref.Addr, fmt.Sprintf("idle-%s-%d", r.id, i%10), &g, &d, nil)
		if err == nil {
			lat.Record(time.Since(t0))
		}
		return cl, err
	})
	secs = time.Since(start).Seconds()
	defer func() {
		for _, cl := range clients {
			if cl != nil {
				cl.ws.CloseNow()
			}
		}
	}()
	if err != nil {
		res.note("reference idle: %v", err)
		return
	}
	time.Sleep(min(3*time.Second, max(500*time.Millisecond, r.cfg.IdleWindow/2)) + r.cfg.IdleWindow)
	after, err := ScrapeMetrics(ctx, r.ref.Addr)
	if err != nil {
		res.note("reference idle: %v", err)
		return
	}
	return (after.RSS - before.RSS) / float64(n), (after.HeapInuse - before.HeapInuse) / float64(n), lat, secs, true
}

// saveProfile fetches a pprof profile into path.
func (r *runner) saveProfile(ctx context.Context, pprofAddr, path, file string, res *Result) {
	if err := fetchTo(ctx, "http://"+pprofAddr+path, file); err != nil {
		res.note("profile %s: %v", path, err)
		return
	}
	res.note("profile saved: %s", file)
}

func fetchTo(ctx context.Context, u, file string) error {
	if err := CheckLoopback(u); err != nil {
		return err
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s", resp.Status)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.ReadFrom(resp.Body)
	return err
}

// quietMetrics scrapes until the server's connection count has stopped
// moving (connections closed just before, by this or an earlier scenario,
// may still be counted for a moment), for at most 10 s.
func quietMetrics(ctx context.Context, addr string) (Metrics, error) {
	m, err := ScrapeMetrics(ctx, addr)
	if err != nil {
		return m, err
	}
	same := 0
	for end := time.Now().Add(10 * time.Second); same < 3 && time.Now().Before(end); {
		time.Sleep(200 * time.Millisecond)
		n, err := ScrapeMetrics(ctx, addr)
		if err != nil {
			return m, err
		}
		if n.Conns == m.Conns {
			same++
		} else {
			same = 0
		}
		m = n
	}
	return m, nil
}
