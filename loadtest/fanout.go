package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ensemble-dev/ensemble/auth"
)

// shards spreads concurrent recording over several histograms.
type shards [16]*Latency

func newShards() *shards {
	var s shards
	for i := range s {
		s[i] = NewLatency()
	}
	return &s
}

func (s *shards) at(i int) *Latency { return s[i%len(s)] }

func (s *shards) merged() *Latency {
	l := NewLatency()
	for _, x := range s {
		l.Merge(x)
	}
	return l
}

// watcherState is one fanout watcher's view, touched only on its reader
// goroutine.
type watcherState struct {
	seen    map[string]int // message id → text length received
	stamps  map[string]int // message id → chunks received
	chunks  int64
	missing int64 // deltas that skipped text (filled by a later message_update)
}

type deltaPayload struct {
	SessionID string `json:"sessionId"`
	MessageID string `json:"messageId"`
	Offset    int    `json:"offset"`
	Text      string `json:"text"`
	Done      bool   `json:"done"` // the delta that ends the message (ensemble.v2)
	// UpdatedAt is the message's write time in the committing transaction
	// (millisecond resolution): it splits a chunk's latency at the write.
	UpdatedAt time.Time `json:"updatedAt"`
}

type messagePayload struct {
	Message wireMessage `json:"message"`
}

type summaryPayload struct {
	Session struct {
		UpdatedAt time.Time `json:"updatedAt"`
	} `json:"session"`
}

// fanout: W workspaces × N watchers over the replicas; P sessions per
// workspace stream stamped sim answers. Measures agent-emission → watcher
// per chunk, commit → watcher per complete object, and the same load shape
// on the bare broadcast server.
func (r *runner) fanout(ctx context.Context) *Result {
	c := r.cfg
	res := &Result{Name: "fanout"}
	res.param("replicas", len(r.addrs))
	res.param("workspaces", c.Workspaces)
	res.param("watchers/workspace", c.Watchers)
	res.param("sessions/workspace", c.Sessions)
	res.param("chunk interval", c.Rate.String())
	res.param("words/answer", c.Words)
	if c.Stagger {
		res.param("stagger", "first prompts spread over one answer")
	}
	var phase atomic.Value
	phase.Store("connecting")
	var connected atomic.Int64
	chunkLat, commitLat := newShards(), newShards()
	// The chunks that arrive in the event creating their message apart from
	// the rest: the runtime holds them until the Turn's acceptance commits.
	firstLat, laterLat := newShards(), newShards()
	// Across replicas: chunks a watcher got from the replica its session's
	// driver uses apart from those that crossed the bus to the other one.
	localLat, remoteLat := newShards(), newShards()
	// A chunk's latency split at its transcript write (the delta's
	// updatedAt): agent emission → write, write → watcher.
	toWrite, fromWrite := newShards(), newShards()
	// The same split for the chunks that create their message.
	firstToWrite, firstFromWrite := newShards(), newShards()
	// The appended chunks by their place in the answer (answerplace.go).
	earlyLat, endLat, restLat := newShards(), newShards(), newShards()
	places := make([]*placeSplit, c.Workspaces*c.Watchers)
	delivered, frames := NewTimeline(), NewTimeline()
	r.progress.set(func() string {
		s := chunkLat.at(0).Summary()
		return fmt.Sprintf("fanout %s: %d conns, %d chunks delivered, p99 (1 shard) %.2f ms", phase.Load(), connected.Load(), delivered.Total(), s.P99)
	})

	// Drivers: one per session, on the replica that will run its agent.
	type sess struct {
		ws, id string
		d      *driver
	}
	// replicaOf: the replica whose address the session's driver uses.
	replicaOf := map[string]int{}
	var sessions []sess
	var drivers []*driver
	defer func() {
		for _, d := range drivers {
			d.c.Close()
		}
	}()
	for i := range c.Workspaces {
		ws := r.workspace("f", i)
		for k := range c.Sessions {
			d, err := newDriver(ctx, r.addr(i*c.Sessions+k), r.token("lt-driver", auth.RoleMember, ws))
			if err != nil {
				res.Skipped = "driver connection failed: " + err.Error()
				return res
			}
			drivers = append(drivers, d)
			sid, err := d.createSession(ctx, ws)
			if err != nil {
				res.Skipped = err.Error()
				return res
			}
			sessions = append(sessions, sess{ws, sid, d})
			replicaOf[sid] = (i*c.Sessions + k) % len(r.addrs)
		}
	}

	// Watchers: subscribe to every session of their workspace.
	var missing atomic.Int64
	watchers, err := dialMany(ctx, c.Workspaces*c.Watchers, 16, &connected, func(ctx context.Context, n int) (*Client, error) {
		wi := n / c.Watchers
		ws := r.workspace("f", wi)
		st := &watcherState{seen: map[string]int{}, stamps: map[string]int{}}
		cl := chunkLat.at(n)
		ml := commitLat.at(n)
		tw, fw := toWrite.at(n), fromWrite.at(n)
		fl, ll := firstLat.at(n), laterLat.at(n)
		ftw, ffw := firstToWrite.at(n), firstFromWrite.at(n)
		ps := newPlaceSplit(earlyLat.at(n), endLat.at(n), restLat.at(n))
		places[n] = ps
		lo, rm := localLat.at(n), remoteLat.at(n)
		on := func(ev *Event, at time.Time) {
			frames.AddAt(at, 1)
			var written time.Time
			var sid, mid string
			first := ev.Kind == "message_update"
			stamp := func(ns int64) {
				emitted := time.Unix(0, ns)
				lat := at.Sub(emitted)
				cl.Record(lat)
				place := st.stamps[mid]
				st.stamps[mid] = place + 1
				if first {
					fl.Record(lat)
					ftw.Record(written.Sub(emitted))
					ffw.Record(at.Sub(written))
				} else {
					ll.Record(lat)
					ps.add(mid, place, lat)
				}
				if len(r.addrs) > 1 {
					if replicaOf[sid] == n%len(r.addrs) {
						lo.Record(lat)
					} else {
						rm.Record(lat)
					}
				}
				tw.Record(written.Sub(emitted))
				fw.Record(at.Sub(written))
				st.chunks++
			}
			var got int
			switch ev.Kind {
			case "message_delta":
				var p deltaPayload
				if json.Unmarshal(ev.Payload, &p) != nil {
					return
				}
				sid, mid = p.SessionID, p.MessageID
				seen := st.seen[p.MessageID]
				end := p.Offset + len(p.Text)
				switch {
				case p.Offset > seen:
					st.missing++
					missing.Add(1)
				case end > seen:
					written = p.UpdatedAt
					got = forStamps(p.Text[seen-p.Offset:], stamp)
					st.seen[p.MessageID] = end
				}
				if p.Done {
					ps.ended(mid)
				}
			case "message_update":
				var p messagePayload
				if json.Unmarshal(ev.Payload, &p) != nil {
					return
				}
				ml.Record(at.Sub(p.Message.UpdatedAt))
				sid, mid = p.Message.SessionID, p.Message.ID
				if p.Message.Role == "agent" {
					t := p.Message.Content.Text
					if seen := st.seen[p.Message.ID]; len(t) > seen {
						written = p.Message.UpdatedAt
						got = forStamps(t[seen:], stamp)
						st.seen[p.Message.ID] = len(t)
					}
				}
			case "turn_update":
				var p turnPayload
				if json.Unmarshal(ev.Payload, &p) == nil {
					ml.Record(at.Sub(p.Turn.UpdatedAt))
				}
			case "session_summary":
				var p summaryPayload
				if json.Unmarshal(ev.Payload, &p) == nil {
					ml.Record(at.Sub(p.Session.UpdatedAt))
				}
			}
			if got > 0 {
				delivered.AddAt(at, int64(got))
			}
		}
		cli, err := Dial(ctx, r.addr(n), r.token(fmt.Sprintf("lt-watcher-%d", n), auth.RoleViewer, ws), DialOptions{OnEvent: on})
		if err != nil {
			return nil, err
		}
		for _, s := range sessions {
			if s.ws != ws {
				continue
			}
			if _, err := cli.Subscribe(ctx, ws, s.id, nil); err != nil {
				cli.Drop()
				return nil, err
			}
		}
		return cli, nil
	})
	defer func() {
		for _, w := range watchers {
			if w != nil {
				w.Drop()
			}
		}
	}()
	if err != nil {
		res.Skipped = "watchers could not connect: " + err.Error()
		return res
	}

	// Stream: each session submits stamped answers back to back.
	phase.Store("streaming")
	delivered.Restart()
	frames.Restart()
	var turns, submitErrors atomic.Int64
	errCodes := newCodeCounter()
	hub0 := r.hubCounters(ctx)
	start := time.Now()
	deadline := start.Add(c.Duration)
	turnTimeout := time.Duration(c.Words)*c.Rate*4 + 30*time.Second
	var wg sync.WaitGroup
	if dir := c.ProfileDir; dir != "" && len(r.replicas) > 0 && r.replicas[0].PprofAddr != "" {
		wg.Add(1)
		go func() { // a CPU profile of replica 1 while it streams
			defer wg.Done()
			secs := max(1, int(c.Duration/time.Second))
			r.saveProfile(ctx, r.replicas[0].PprofAddr, fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs),
				filepath.Join(dir, "fanout-cpu.pb.gz"), res)
		}()
	}
	for si, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c.Stagger {
				select {
				case <-time.After(staggerOffset(si, len(sessions), time.Duration(c.Words)*c.Rate)):
				case <-ctx.Done():
					return
				}
			}
			for n := 0; time.Now().Before(deadline) && ctx.Err() == nil; n++ {
				text := fmt.Sprintf("/sim words=%d rate=%s stamp\nfanout load %d", c.Words, c.Rate, n)
				tctx, cancel := context.WithTimeout(ctx, turnTimeout)
				tid, err := s.d.submit(tctx, s.ws, s.id, fmt.Sprintf("lt-%s-f-%d-%d", r.id, si, n), text)
				if err == nil {
					err = s.d.wait(tctx, tid)
				}
				cancel()
				if err != nil {
					submitErrors.Add(1)
					errCodes.add(err)
					if errors.Is(err, ErrClosed) {
						return
					}
					time.Sleep(50 * time.Millisecond)
					continue
				}
				turns.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	phase.Store("draining")
	// Let the last events reach every watcher.
	canonical := int64(0)
	for _, s := range sessions {
		ms, err := s.d.messages(ctx, s.ws, s.id)
		if err != nil {
			res.note("message.list failed: %v", err)
			continue
		}
		for _, m := range ms {
			if m.Role == "agent" {
				canonical += int64(forStamps(m.Content.Text, nil))
			}
		}
	}
	want := canonical * int64(c.Watchers)
	for end := time.Now().Add(10 * time.Second); delivered.Total() < want && time.Now().Before(end); {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if hub0 != nil {
		if hub1 := r.hubCounters(ctx); hub1 != nil {
			d := hub1.sub(*hub0)
			res.count("server CPU seconds", fmt.Sprintf("%.2f", d.CPUSeconds))
			res.count("hub deltas applied", int64(d.Deltas))
			res.count("hub delta gaps", int64(d.DeltaGaps))
			res.count("hub delta duplicates (the change came first by a reread)", int64(d.DeltaDups))
			res.count("hub rereads", int64(d.Rereads))
			res.count("hub typed turn facts applied", int64(d.Typed))
			res.count("hub writes", int64(d.Writes))
			res.count("hub writes inline", int64(d.Inline))
			res.count("hub frames written", int64(d.Frames))
			if d.Commits > 0 {
				res.count("SQLite commits", int64(d.Commits))
				res.count("SQLite updates committed (÷ commits: mean group size)", int64(d.Updates))
			}
		}
	}

	res.Seconds = elapsed.Seconds()
	ens := res.series("Ensemble chunk: agent emission → watcher", false, chunkLat.merged(), delivered, elapsed.Seconds(), "chunks")
	res.series("Ensemble chunk: agent emission → transcript write (updatedAt, ms resolution)", false, toWrite.merged(), delivered, elapsed.Seconds(), "chunks")
	res.series("Ensemble chunk: transcript write → watcher (updatedAt, ms resolution)", false, fromWrite.merged(), delivered, elapsed.Seconds(), "chunks")
	res.series("Ensemble chunk, in the event that creates its message (message_update): agent emission → watcher", false, firstLat.merged(), nil, elapsed.Seconds(), "")
	res.series("Ensemble chunk, in the event that creates its message: agent emission → transcript write", false, firstToWrite.merged(), nil, elapsed.Seconds(), "")
	res.series("Ensemble chunk, in the event that creates its message: transcript write → watcher", false, firstFromWrite.merged(), nil, elapsed.Seconds(), "")
	res.series("Ensemble chunk, appended (message_delta): agent emission → watcher", false, laterLat.merged(), nil, elapsed.Seconds(), "")
	for _, ps := range places { // every watcher connected, or the run was skipped above
		ps.flush()
	}
	res.series("Ensemble chunk, appended, an answer's 2nd to 10th: agent emission → watcher", false, earlyLat.merged(), nil, elapsed.Seconds(), "")
	res.series("Ensemble chunk, appended, an answer's last 10: agent emission → watcher", false, endLat.merged(), nil, elapsed.Seconds(), "")
	res.series("Ensemble chunk, appended, the rest of the answer: agent emission → watcher", false, restLat.merged(), nil, elapsed.Seconds(), "")
	if len(r.addrs) > 1 {
		res.series("Ensemble chunk, watcher on the driver's replica: agent emission → watcher", false, localLat.merged(), nil, elapsed.Seconds(), "")
		res.series("Ensemble chunk, watcher on another replica (through the bus): agent emission → watcher", false, remoteLat.merged(), nil, elapsed.Seconds(), "")
	}
	res.series("Ensemble commit → watcher (updatedAt, ms resolution)", false, commitLat.merged(), frames, elapsed.Seconds(), "frames")
	var gaps, dups, epochs int64
	for _, w := range watchers {
		gaps += w.Gaps.Load()
		dups += w.Duplicates.Load()
		epochs += w.EpochMoves.Load()
	}
	res.count("turns", turns.Load())
	res.count("chunks emitted (canonical)", canonical)
	res.count("chunk deliveries expected", want)
	res.count("chunk deliveries", delivered.Total())
	res.count("frames delivered", frames.Total())
	res.count("submit errors", submitErrors.Load())
	if s := errCodes.String(); s != "" {
		res.count("error codes", s)
	}
	res.count("gaps", gaps)
	res.count("duplicates", dups)
	res.count("epoch changes", epochs)
	res.count("deltas past the known text", missing.Load())
	res.check("no gaps or duplicates", gaps == 0 && dups == 0 && epochs == 0, "%d gaps, %d duplicates, %d epoch changes", gaps, dups, epochs)
	res.check("every chunk reached every watcher once", delivered.Total() == want && want > 0,
		"%d deliveries for %d canonical chunks × %d watchers = %d", delivered.Total(), canonical, c.Watchers, want)
	res.note("Chunk latency: the sim agent appends its wall-clock time to each chunk (/sim stamp) just before sending it over ACP; the watcher subtracts it from the time its read returned. It covers ACP, the durable write, the bus, the hub's reread, encoding and the WebSocket hop. Both ends use this machine's clock.")
	res.note("Chunk latency split at the transcript write: the message's updatedAt is taken inside the output transaction, after the session lock and the Turn read and before the appends and COMMIT, truncated to the millisecond; so emission → write reads up to 1 ms low and write → watcher up to 1 ms high, and the two add up to the chunk latency.")
	res.note("Commit latency: receive time minus the object's updatedAt, which the Host sets (truncated to the millisecond) just before the write commits — so it is coarse and slightly pessimistic.")

	// The same shape on the bare broadcast server.
	if r.ref != nil {
		phase.Store("reference")
		refLat, refTL := r.refFanout(ctx, &connected, res)
		if refLat != nil {
			ref := res.series("bare coder/websocket broadcast", true, refLat, refTL, c.Duration.Seconds(), "chunks")
			res.ratio("p50 chunk latency", ens.Latency.P50, ref.Latency.P50, "ms", "bare broadcast p50")
			res.ratio("p99 chunk latency", ens.Latency.P99, ref.Latency.P99, "ms", "bare broadcast p99")
			res.ratio("p99.9 chunk latency", ens.Latency.P999, ref.Latency.P999, "ms", "bare broadcast p99.9")
			res.ratio("chunks delivered/s (higher is better)", ens.Throughput, ref.Throughput, "chunks/s", "bare broadcast, same shape")
			ratio, limit := ens.Latency.P99/ref.Latency.P99, fanoutP99Limit(len(r.addrs))
			res.Targets = append(res.Targets, Target{Name: "fanout p99",
				Goal:     fmt.Sprintf("chunk→watcher p99 within %g× the bare broadcast server's p99 (issue 10: 2× on one replica, 3× across replicas)", limit),
				Measured: fmt.Sprintf("%.2f ms vs %.2f ms = %.2f× (%d replica(s), %s bus)", ens.Latency.P99, ref.Latency.P99, ratio, len(r.addrs), r.rep.Setup.Bus),
				Met:      ratio <= limit})
		}
	}
	// One small durable PostgreSQL transaction per chunk at the same rate:
	// the floor under any pipeline that commits each chunk before it shows
	// it, which the bare broadcast server does not.
	if !c.NoReferences && !c.NoCommitFloor && c.DatabaseURL != "" {
		phase.Store("reference: pgbench")
		clients := c.Workspaces * c.Sessions
		tps := float64(clients) * float64(time.Second) / float64(c.Rate)
		if lat, cmd, err := r.commitFloor(ctx, clients, tps, c.Duration); err != nil {
			res.note("Durable commit floor not measured: %v.", err)
		} else {
			fl := res.series(fmt.Sprintf("durable commit floor: pgbench -N, %d clients at %.0f tx/s (the chunk commit rate)", clients, tps), true, lat, nil, c.Duration.Seconds(), "")
			res.ratio("p99 chunk latency vs one durable commit", ens.Latency.P99, fl.Latency.P99, "ms", "pgbench -N p99 at the same commit rate")
			res.note("Durable commit floor: `%s`; each transaction's latency includes its schedule lag, as a chunk's includes its queueing.", cmd)
		}
	}
	if rb := r.refs["redis"]; rb != nil && rb.Value > 0 && len(r.addrs) > 1 {
		res.ratio("chunk commits/s vs Redis PUBLISH/s", float64(canonical)/elapsed.Seconds(), rb.Value, "/s", "redis-benchmark PUBLISH (the bus's ceiling)")
	}
	return res
}

// refFanout runs the fanout shape on the reference server.
func (r *runner) refFanout(ctx context.Context, connected *atomic.Int64, res *Result) (*Latency, *Timeline) {
	c := r.cfg
	lat := newShards()
	tl := NewTimeline()
	var gaps, dups atomic.Int64
	prefix := "fan-" + r.id + "-"
	connected.Store(0)
	clients, err := dialMany(ctx, c.Workspaces*c.Watchers, 16, connected, func(ctx context.Context, n int) (*refClient, error) {
		l := lat.at(n)
		return dialRef(ctx, r.ref.Addr, fmt.Sprintf("%s%d", prefix, n/c.Watchers), &gaps, &dups, func(text string, at time.Time) {
			tl.AddAt(at, int64(forStamps(text, func(ns int64) { l.Record(at.Sub(time.Unix(0, ns))) })))
		})
	})
	defer func() {
		for _, cl := range clients {
			if cl != nil {
				cl.ws.CloseNow()
			}
		}
	}()
	if err != nil {
		res.note("reference fanout: %v", err)
		return nil, nil
	}
	tl.Restart()
	if err := startPublishers(ctx, r.ref.Addr, prefix, c.Workspaces, c.Sessions, c.Rate, c.Duration); err != nil {
		res.note("reference fanout: %v", err)
		return nil, nil
	}
	select {
	case <-time.After(c.Duration + 500*time.Millisecond):
	case <-ctx.Done():
	}
	res.count("reference gaps", gaps.Load())
	res.count("reference duplicates", dups.Load())
	res.count("reference chunk deliveries", tl.Total())
	return lat.merged(), tl
}

// fanoutP99Limit is issue 10's bound on the fan-out p99 as a multiple of
// the bare server's: a second replica adds the bus hop.
// staggerOffset is when session i of n sends its first prompt with
// Config.Stagger: evenly spread over one answer's streaming time.
func staggerOffset(i, n int, answer time.Duration) time.Duration {
	if n <= 0 {
		return 0
	}
	return answer * time.Duration(i) / time.Duration(n)
}

func fanoutP99Limit(replicas int) float64 {
	if replicas > 1 {
		return 3
	}
	return 2
}

// hubCounters sums the hub's counters over the replicas (nil when one
// cannot be read): over the measured phase they say how the chunks went
// out — deltas applied or rereads, writes made inline or by workers.
func (r *runner) hubCounters(ctx context.Context) *Metrics {
	var sum Metrics
	for _, a := range r.addrs {
		m, err := scrapeRetry(ctx, a)
		if err != nil {
			return nil
		}
		sum = sum.add(m)
	}
	return &sum
}
