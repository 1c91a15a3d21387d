package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// BenchOutput measures the output commit path of a store through the real
// Host: a Turn's sink is fed chunks of one word each.
//
//   - burst: b.N chunks reported back to back, then the terminal; batches
//     form while a commit is in flight. Reports output transactions and
//     store calls (one statement each) per chunk.
//   - answer=N: one answer of N chunks, each committed alone (the next is
//     reported when the previous commit finished), reporting the time per
//     chunk over the first and the last tenth of the answer: a flat cost
//     has the two equal, whatever N.
func BenchOutput(b *testing.B, open func(b *testing.B) host.Store) {
	BenchOutputStatements(b, open, nil)
}

// BenchOutputStatements is BenchOutput that also reports SQL statements,
// counted by statements (a driver-level counter, e.g. a pgx tracer): per
// output transaction in the burst, and per chunk over a whole answer (the
// session's creation, the submit and the terminal included, amortized), so
// a count that does not depend on the answer length shows as the same
// figure at answer=2000 and answer=20000.
func BenchOutputStatements(b *testing.B, open func(b *testing.B) host.Store, statements func() int64) {
	b.Run("burst", func(b *testing.B) {
		bo := startBench(b, open(b))
		b.ReportAllocs()
		b.ResetTimer()
		stmts0 := count(statements)
		for i := range b.N {
			bo.output(b, i, false)
		}
		bo.finish(b)
		b.StopTimer()
		txs, calls := bo.st.counts()
		if statements != nil {
			b.ReportMetric(float64(count(statements)-stmts0)/float64(max(txs, 1)), "stmts/tx")
		}
		b.ReportMetric(float64(txs)/float64(b.N), "tx/chunk")
		b.ReportMetric(float64(calls)/float64(max(txs, 1)), "calls/tx")
	})
	for _, n := range []int{2000, 20000} {
		b.Run(fmt.Sprintf("answer=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var first, last time.Duration
			stmts0 := count(statements)
			for range b.N {
				bo := startBench(b, open(b))
				tenth := n / 10
				var start time.Time
				for i := range n {
					switch i {
					case 0, n - tenth:
						start = time.Now()
					case tenth:
						first += time.Since(start)
					}
					bo.output(b, i, true)
				}
				last += time.Since(start)
				bo.finish(b)
			}
			b.ReportMetric(float64(first.Nanoseconds())/float64(b.N*(n/10)), "ns/chunk-first10%")
			b.ReportMetric(float64(last.Nanoseconds())/float64(b.N*(n/10)), "ns/chunk-last10%")
			if statements != nil {
				b.ReportMetric(float64(count(statements)-stmts0)/float64(b.N*n), "stmts/chunk")
			}
		})
	}
}

func count(f func() int64) int64 {
	if f == nil {
		return 0
	}
	return f()
}

type benchOutput struct {
	h    *host.Host
	st   *countingStore
	sink host.TurnSink
	done chan struct{}
}

func startBench(b testing.TB, inner host.Store) *benchOutput {
	b.Helper()
	st := &countingStore{Store: inner, committed: make(chan struct{}, 1)}
	rt := NewSinkRuntime()
	h := host.New(host.Config{Store: st, Runtime: rt})
	ctx := context.Background()
	if _, err := h.Recover(ctx); err != nil {
		b.Fatal(err)
	}
	ws := uid("ws-bench")
	r, err := h.CreateSession(ctx, host.CreateSessionInput{WorkspaceID: ws, CreatedBy: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := h.SendInput(ctx, host.SendInput{WorkspaceID: ws, SessionID: r.Session.ID, ClientSubmitID: "bench",
		Content: host.MessageContent{Text: "go"}, SubmittedBy: "bench"}); err != nil {
		b.Fatal(err)
	}
	st.reset()
	return &benchOutput{h: h, st: st, sink: <-rt.Sinks}
}

// output reports chunk i; with wait, it returns once it is committed.
func (bo *benchOutput) output(b testing.TB, i int, wait bool) {
	ev := host.OutputEvent{Seq: int64(i + 1), Key: "text-1", Kind: host.KindText, Text: "word "}
	if err := bo.sink.Output(context.Background(), ev); err != nil {
		b.Fatal(err)
	}
	if wait {
		<-bo.st.committed
	}
}

func (bo *benchOutput) finish(b testing.TB) {
	if err := bo.sink.Terminal(context.Background(), host.Terminal{Outcome: host.OutcomeCompleted}); err != nil {
		b.Fatal(err)
	}
}

// StreamChunks feeds n one-word chunks to a Turn's sink through the real
// Host, each committed alone (the next is reported once the previous
// commit finished), calls after(i) once chunk i is committed, and then
// completes the Turn. Store tests use it to look at what one output
// commit wrote.
func StreamChunks(t testing.TB, st host.Store, n int, after func(i int)) {
	bo := startBench(t, st)
	for i := range n {
		bo.output(t, i, true)
		after(i)
	}
	bo.finish(t)
}

// SinkRuntime accepts every dispatch and hands the Turn's sink to the
// benchmark or test on Sinks, which drives the output itself.
type SinkRuntime struct {
	host.NoRuntimeCapabilities
	Sinks chan host.TurnSink
}

// NewSinkRuntime returns a SinkRuntime that holds one undelivered sink.
func NewSinkRuntime() *SinkRuntime { return &SinkRuntime{Sinks: make(chan host.TurnSink, 1)} }

func (r *SinkRuntime) Start(_ context.Context, req host.StartRequest) (host.StartResult, error) {
	return host.StartResult{ProviderSessionID: "bench-" + req.SessionID, Created: true, Resumed: true}, nil
}

func (r *SinkRuntime) Dispatch(ctx context.Context, req host.DispatchRequest, sink host.TurnSink) error {
	if err := sink.Accepted(ctx, host.Acceptance{ProviderSessionID: req.ProviderSessionID, ProviderTurnID: "pt-" + req.Ref.TurnID}); err != nil {
		return err
	}
	r.Sinks <- sink
	return nil
}

func (r *SinkRuntime) Cancel(context.Context, host.TurnRef) (host.CancelReport, error) {
	return host.CancelReport{}, nil
}
func (r *SinkRuntime) Release(context.Context, string, string) error { return nil }
func (r *SinkRuntime) Destroy(context.Context, string, string) error { return nil }
func (r *SinkRuntime) Describe() host.AgentInfo                      { return host.AgentInfo{Name: "bench"} }

// Live reports no live session: every Turn goes through Start.
func (r *SinkRuntime) Live(string, string) (string, bool) { return "", false }

// countingStore counts output transactions and their Tx calls, and
// signals each committed one.
type countingStore struct {
	host.Store
	mu        sync.Mutex
	txs       int
	calls     int
	committed chan struct{}
}

func (s *countingStore) reset() {
	s.mu.Lock()
	s.txs, s.calls = 0, 0
	s.mu.Unlock()
}

func (s *countingStore) counts() (txs, calls int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.txs, s.calls
}

func (s *countingStore) Update(ctx context.Context, fn func(host.Tx) error) error {
	var ct *countingTx
	err := s.Store.Update(ctx, func(tx host.Tx) error {
		ct = &countingTx{Tx: tx}
		return fn(ct)
	})
	if err == nil && ct != nil && ct.appends > 0 {
		s.mu.Lock()
		s.txs++
		s.calls += ct.calls
		s.mu.Unlock()
		select {
		case s.committed <- struct{}{}:
		default:
		}
	}
	return err
}

// countingTx counts the calls of the output path.
type countingTx struct {
	host.Tx
	calls, appends int
}

func (tx *countingTx) Session(ctx context.Context, ws, id string) (host.Session, error) {
	tx.calls++
	return tx.Tx.Session(ctx, ws, id)
}

func (tx *countingTx) Turn(ctx context.Context, ws, sessionID, turnID string) (host.Turn, error) {
	tx.calls++
	return tx.Tx.Turn(ctx, ws, sessionID, turnID)
}

func (tx *countingTx) UpdateTurn(ctx context.Context, t host.Turn) error {
	tx.calls++
	return tx.Tx.UpdateTurn(ctx, t)
}

func (tx *countingTx) UpdateSession(ctx context.Context, s host.Session) error {
	tx.calls++
	return tx.Tx.UpdateSession(ctx, s)
}

func (tx *countingTx) AdvanceTurn(ctx context.Context, ws, sessionID, turnID string, seq int64, at time.Time) error {
	tx.calls++
	return tx.Tx.AdvanceTurn(ctx, ws, sessionID, turnID, seq, at)
}

func (tx *countingTx) AdvanceSession(ctx context.Context, ws, id string, version int64, at time.Time) error {
	tx.calls++
	return tx.Tx.AdvanceSession(ctx, ws, id, version, at)
}

func (tx *countingTx) AppendMessage(ctx context.Context, a host.MessageAppend) (host.AppendResult, error) {
	tx.calls++
	tx.appends++
	return tx.Tx.AppendMessage(ctx, a)
}

func (tx *countingTx) AppendFacts(ctx context.Context, facts ...host.Fact) ([]int64, error) {
	tx.calls++
	return tx.Tx.AppendFacts(ctx, facts...)
}
