package pg

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/host/storetest"
	"github.com/ensemble-dev/ensemble/runtime/acp"
	"github.com/ensemble-dev/ensemble/runtime/sim"
)

// BenchmarkDurableSubmit measures durable submits per second on PostgreSQL
// through the real Host: each client owns a session and submits one prompt
// after another; a submit counts once the provider identity is durably
// bound (SendInput returned) and the sim agent's instant answer is settled,
// so the session takes the next prompt. scripts/bench-pg.sh runs it next to
// pgbench on the same server and prints the ratio.
//
// Reported per submit: statements, round trips (a pgx.Batch is one: BEGIN
// goes with the first statement, deferred writes with the next statement
// or COMMIT, see txconn.go), transactions, and where the round trip time
// went by the kind of the last statement of each round trip: commits (WAL
// flush), session row locks (FOR UPDATE: includes any lock wait), other
// reads and writes.
func BenchmarkDurableSubmit(b *testing.B) {
	for _, clients := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) { benchSubmits(b, clients) })
	}
}

func benchSubmits(b *testing.B, clients int) {
	url, _ := testSchema(b)
	tr := &statTracer{}
	st := openTest(b, url, Options{Tracer: tr, Logger: quietLogger()})
	rt := &settleProbe{Runtime: acp.New(acp.Config{Name: sim.Name, Simulated: true, Logger: quietLogger(),
		// One answer chunk: the turn's canonical work is admission, the
		// acceptance barrier, one agent message and settlement.
		Dial: sim.Dial(sim.Options{Rate: -1, ChunkWords: 1 << 20, Logger: quietLogger()})})}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Runtime.(*acp.Runtime).Shutdown(ctx)
	})
	h := host.New(host.Config{Store: st, Runtime: rt, Logger: quietLogger()})
	ctx := context.Background()
	if _, err := h.Recover(ctx); err != nil {
		b.Fatal(err)
	}
	ws := "ws-bench"
	sids := make([]string, clients)
	for i := range sids {
		r, err := h.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: ws, CreatedBy: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		sids[i] = r.Session.ID
		// Warm up: the first prompt of a session starts its provider
		// session; the others give each session a history to plan on.
		for n := range warmTurns(clients) {
			submitAndSettle(b, h, rt, ws, sids[i], fmt.Sprintf("warm-%d-%d", i, n))
		}
	}
	analyzeSchema(b, st)

	tr.reset()
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for c := range clients {
		wg.Go(func() {
			for n := next.Add(1); n <= int64(b.N); n = next.Add(1) {
				submitAndSettle(b, h, rt, ws, sids[c], fmt.Sprintf("b-%d", n))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()

	s := tr.snapshot()
	per := func(v float64) float64 { return v / float64(b.N) }
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "submits/s")
	b.ReportMetric(per(float64(s.count[kindAll])), "stmts/submit")
	b.ReportMetric(per(float64(s.trips)), "rtt/submit")
	b.ReportMetric(per(float64(s.count[kindCommit])), "tx/submit")
	b.ReportMetric(per(float64(s.count[kindLock])), "locks/submit")
	for _, k := range []stmtKind{kindCommit, kindLock, kindRead, kindWrite} {
		b.ReportMetric(per(s.dur[k].Seconds()*1000), k.String()+"-ms/submit")
	}
}

// warmTurns is how many prompts each session answers before the timer:
// 20, and more when there are few sessions, so the schema holds warmTotal
// Turns when analyzeSchema runs.
func warmTurns(clients int) int { return max(20, (warmTotal+clients-1)/clients) }

// warmTotal keeps the tables past their first pages when they are
// analyzed. Statistics taken on a one-page table plan every key lookup as
// a sequential scan, and a prepared statement keeps its plan while the
// table grows until the next ANALYZE (autovacuum's comes after each tenth
// of growth, a minute apart at most): with 20 warm Turns, the one-client
// run's session grew to 2,000 Turns in seconds and every Turn read, Turn
// update and claim update scanned the whole table (docs/performance.md,
// "A one-client benchmark planned on one page").
const warmTotal = 500

// analyzeSchema gives the planner the statistics autovacuum gives a running
// deployment within a minute of its first writes. A short benchmark on a
// fresh schema is planned without any: PostgreSQL's default selectivities
// then tie a Turn's key lookup (workspace, session, id) with turns_seq
// (workspace, session, seq), and it reads every Turn of the session on each
// sink write: the benchmark measured a cost growing with its own length
// (docs/performance.md, "Planned without statistics").
func analyzeSchema(b *testing.B, st *Store) {
	ctx := b.Context()
	rows, err := st.pool.Query(ctx, `SELECT c.oid::regclass::text FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = current_schema() AND c.relkind = 'r'`)
	if err != nil {
		b.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		b.Fatal(err)
	}
	for _, t := range tables {
		if _, err := st.pool.Exec(ctx, `ANALYZE `+t); err != nil {
			b.Fatal(err)
		}
	}
}

// submitAndSettle submits one prompt and waits until its turn settled.
func submitAndSettle(b testing.TB, h *host.Host, rt *settleProbe, ws, sid, id string) {
	r, err := h.SendInput(context.Background(), host.SendInput{WorkspaceID: ws, SessionID: sid, ClientSubmitID: id,
		Content: host.MessageContent{Text: "benchmark prompt"}, SubmittedBy: "bench"})
	if err != nil {
		b.Error(err)
		return
	}
	select {
	case <-rt.settled(r.Turn.ID):
		rt.forget(r.Turn.ID)
	case <-time.After(30 * time.Second):
		b.Errorf("turn %s did not settle", r.Turn.ID)
	}
}

// settleProbe signals when a Turn's terminal is recorded, so a client knows
// its session is idle again without polling the store.
type settleProbe struct {
	host.Runtime
	mu   sync.Mutex
	done map[string]chan struct{}
}

func (p *settleProbe) settled(turnID string) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		p.done = map[string]chan struct{}{}
	}
	ch := p.done[turnID]
	if ch == nil {
		ch = make(chan struct{})
		p.done[turnID] = ch
	}
	return ch
}

func (p *settleProbe) forget(turnID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.done, turnID)
}

func (p *settleProbe) Dispatch(ctx context.Context, req host.DispatchRequest, sink host.TurnSink) error {
	return p.Runtime.Dispatch(ctx, req, &settleSink{TurnSink: sink, done: p.settled(req.Ref.TurnID)})
}

type settleSink struct {
	host.TurnSink
	done chan struct{}
	once sync.Once
}

// Accepted: an answer that was over at the barrier, or ended while the
// acceptance read the Turn (More), settles with it.
func (s *settleSink) Accepted(ctx context.Context, a host.Acceptance) error {
	ended := a.Terminal != nil
	if more := a.More; more != nil {
		a.More = func() ([]host.OutputEvent, *host.Terminal) {
			out, end := more()
			ended = ended || end != nil
			return out, end
		}
	}
	err := s.TurnSink.Accepted(ctx, a)
	if err == nil && ended {
		s.once.Do(func() { close(s.done) })
	}
	return err
}

func (s *settleSink) Terminal(ctx context.Context, t host.Terminal) error {
	err := s.TurnSink.Terminal(ctx, t)
	if err == nil {
		s.once.Do(func() { close(s.done) })
	}
	return err
}

type stmtKind int

const (
	kindAll stmtKind = iota
	kindCommit
	kindLock
	kindRead
	kindWrite
	kinds
)

func (k stmtKind) String() string {
	return [...]string{"all", "commit", "lock", "read", "write"}[k]
}

func classifyStmt(sql string) stmtKind {
	// No strings.ToLower of the whole statement: the tracer runs in the
	// measured process, on every statement.
	s := strings.TrimSpace(sql)
	word := s
	if i := strings.IndexFunc(s, unicode.IsSpace); i >= 0 {
		word = s[:i]
	}
	switch {
	case strings.EqualFold(word, "commit"):
		return kindCommit
	case strings.EqualFold(word, "begin") || strings.EqualFold(word, "rollback"):
		return kindWrite
	case strings.Contains(s, "FOR UPDATE") || strings.Contains(s, "for update"):
		return kindLock
	case strings.EqualFold(word, "select"):
		return kindRead
	}
	return kindWrite
}

// statTracer counts statements by kind and round trips, and times the
// round trips. It sees plain statements and pgx batches.
type statTracer struct {
	mu    sync.Mutex
	count [kinds]int64
	dur   [kinds]time.Duration
	trips int64
}

type traceStart struct {
	kinds []stmtKind
	at    time.Time
}

type traceKey struct{}

func (t *statTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, traceKey{}, traceStart{kinds: []stmtKind{classifyStmt(d.SQL)}, at: time.Now()})
}

func (t *statTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	t.end(ctx)
}

func (t *statTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	ks := make([]stmtKind, len(d.Batch.QueuedQueries))
	for i, q := range d.Batch.QueuedQueries {
		ks[i] = classifyStmt(q.SQL)
	}
	return context.WithValue(ctx, traceKey{}, traceStart{kinds: ks, at: time.Now()})
}

func (t *statTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (t *statTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchEndData) {
	t.end(ctx)
}

// end records one round trip: its statements by kind, its time under the
// kind of its last statement (what it waited for: a commit's flush, a
// lock, a read).
func (t *statTracer) end(ctx context.Context) {
	s, ok := ctx.Value(traceKey{}).(traceStart)
	if !ok || len(s.kinds) == 0 {
		return
	}
	d := time.Since(s.at)
	last := s.kinds[len(s.kinds)-1]
	t.mu.Lock()
	defer t.mu.Unlock()
	t.trips++
	for _, k := range s.kinds {
		t.count[kindAll]++
		t.count[k]++
	}
	t.dur[kindAll] += d
	t.dur[last] += d
}

func (t *statTracer) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.count, t.dur, t.trips = [kinds]int64{}, [kinds]time.Duration{}, 0
}

func (t *statTracer) snapshot() statTracer {
	t.mu.Lock()
	defer t.mu.Unlock()
	return statTracer{count: t.count, dur: t.dur, trips: t.trips}
}

// BenchmarkOutputCommit: go test ./pg -run '^$' -bench OutputCommit (also reports SQL
// statements per output transaction and per chunk, counted by a pgx tracer)
func BenchmarkOutputCommit(b *testing.B) {
	url, _ := testSchema(b)
	tr := &statTracer{}
	st := openTest(b, url, Options{Tracer: tr, Logger: quietLogger()})
	storetest.BenchOutputStatements(b, func(*testing.B) host.Store { return noClose{st} },
		func() int64 { return tr.snapshot().count[kindAll] })
}

// noClose shares one store between sub-benchmarks; the test cleanup closes it.
type noClose struct{ *Store }

func (noClose) Close() error { return nil }
