package pg

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ensemble-dev/ensemble/host"
	"github.com/ensemble-dev/ensemble/host/storetest"
)

// rtTracer records, per connection, the round trips of each transaction:
// a plain statement is one round trip, a pgx.Batch is one round trip
// whatever it holds. A transaction starts with the round trip that carries
// BEGIN and ends with the one that carries COMMIT or ROLLBACK.
//
// It sees what pgx is asked to send; a statement pgx has not prepared on
// that connection yet costs one more (unseen) round trip to prepare it, so
// the tests warm the statement cache up with the same work first.
type rtTracer struct {
	mu    sync.Mutex
	open  map[*pgx.Conn]*txTrace
	txs   []txTrace
	other int // round trips outside any transaction
}

// txTrace is one transaction: its round trips, each the statements it
// carried (lower case, first word or two).
type txTrace struct {
	trips [][]string
}

func (t *rtTracer) TraceQueryStart(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	t.trip(c, []string{d.SQL})
	return ctx
}

func (t *rtTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (t *rtTracer) TraceBatchStart(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	sqls := make([]string, len(d.Batch.QueuedQueries))
	for i, q := range d.Batch.QueuedQueries {
		sqls[i] = q.SQL
	}
	t.trip(c, sqls)
	return ctx
}

func (t *rtTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (t *rtTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (t *rtTracer) trip(c *pgx.Conn, sqls []string) {
	names := make([]string, len(sqls))
	for i, s := range sqls {
		names[i] = stmtName(s)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.open == nil {
		t.open = map[*pgx.Conn]*txTrace{}
	}
	cur := t.open[c]
	if slices.Contains(names, "begin") {
		cur = &txTrace{}
		t.open[c] = cur
	}
	if cur == nil {
		t.other++
		return
	}
	cur.trips = append(cur.trips, names)
	if slices.Contains(names, "commit") || slices.Contains(names, "rollback") {
		t.txs = append(t.txs, *cur)
		delete(t.open, c)
	}
}

// stmtName shortens a statement to what tells it apart in a failure
// message: "select … from turns", "update sessions", "insert into outbox".
func stmtName(sql string) string {
	f := strings.Fields(strings.ToLower(sql))
	switch {
	case len(f) == 0:
		return ""
	case f[0] == "select":
		if i := slices.Index(f, "from"); i >= 0 && i+1 < len(f) {
			return "select " + f[i+1]
		}
	case f[0] == "update" && len(f) > 1:
		return "update " + f[1]
	case f[0] == "insert" && len(f) > 2:
		return "insert " + f[2]
	case f[0] == "with" && len(f) > 1:
		return "with " + f[1]
	}
	return f[0]
}

func (t *rtTracer) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.txs, t.other = nil, 0
}

// outside counts the round trips outside any transaction.
func (t *rtTracer) outside() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.other
}

// openTrips counts the round trips of the transactions still open.
func (t *rtTracer) openTrips() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, tt := range t.open {
		n += len(tt.trips)
	}
	return n
}

func (t *rtTracer) transactions() []txTrace {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.txs)
}

func (tt txTrace) String() string {
	var b strings.Builder
	for i, trip := range tt.trips {
		fmt.Fprintf(&b, "\n    %d: %s", i+1, strings.Join(trip, " + "))
	}
	return b.String()
}

// roundTrips is the round trip count of each transaction.
func roundTrips(txs []txTrace) []int {
	out := make([]int, len(txs))
	for i, tt := range txs {
		out[i] = len(tt.trips)
	}
	return out
}

// statements counts the statements of txs, BEGIN and COMMIT included:
// PostgreSQL's work per transaction grows with them, whatever the batches.
func statements(txs []txTrace) int {
	n := 0
	for _, tt := range txs {
		for _, trip := range tt.trips {
			n += len(trip)
		}
	}
	return n
}

// signalStore signals every Update that committed.
type signalStore struct {
	host.Store
	committed chan struct{}
}

func (s *signalStore) Update(ctx context.Context, fn func(host.Tx) error) error {
	err := s.Store.Update(ctx, fn)
	if err == nil {
		s.committed <- struct{}{}
	}
	return err
}

// TestOutputCommitRoundTrips: committing one streamed chunk is 1 round
// trip: BEGIN, the check that the session and Turn are as the acceptance
// or the previous output commit left them (Tx.ExpectOutput, which locks
// the session), the append at the offset that commit left (the Host builds
// the delta from it; the statement refuses the transaction if the message
// is not that long), the outbox insert with the Turn and session updates
// as its parts (outbox.go) and COMMIT, as one batch: both checks fail the
// transaction on the server (ensemble_fence), so neither is read before
// COMMIT. One per statement it was 9; with the outbox ids returned inside
// the transaction and the session read on its own, 5; with the Turn and
// session read instead of checked, 3; with the append's result read
// before COMMIT, 2. 5 statements, BEGIN and COMMIT included. The answer's
// first chunk, which creates its message, is the same.
func TestOutputCommitRoundTrips(t *testing.T) {
	url, _ := testSchema(t)
	tr := &rtTracer{}
	// One connection: the statement cache the warm-up fills is the one the
	// measured commit uses.
	st := openTest(t, withParams(url, map[string]string{"pool_max_conns": "1"}), Options{Tracer: tr, Logger: quietLogger()})
	ss := &signalStore{Store: st, committed: make(chan struct{}, 64)}
	rt := storetest.NewSinkRuntime()
	h, sid := rtSession(t, ss, rt)
	ctx := t.Context()
	if _, err := h.SendInput(ctx, host.SendInput{WorkspaceID: "ws-rt", SessionID: sid, ClientSubmitID: "rt-1",
		Content: host.MessageContent{Text: "go"}, SubmittedBy: "rt"}); err != nil {
		t.Fatal(err)
	}
	sink := <-rt.Sinks
	drain(ss.committed)

	chunk := func(seq int64) {
		t.Helper()
		if err := sink.Output(ctx, host.OutputEvent{Seq: seq, Key: "text-1", Kind: host.KindText, Text: "word "}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ss.committed:
		case <-time.After(10 * time.Second):
			t.Fatal("output not committed")
		}
	}
	measured := func(what string) {
		t.Helper()
		txs := tr.transactions()
		if got, want := roundTrips(txs), []int{1}; !slices.Equal(got, want) {
			t.Fatalf("%s: round trips per transaction = %v, want %v; trips:%v", what, got, want, txs)
		}
		if n := statements(txs); n != 5 {
			t.Fatalf("%s: statements = %d, want 5; trips:%v", what, n, txs)
		}
		t.Logf("%s:%v", what, txs[0])
	}
	// The first chunk creates the message: new in a Turn that applied no
	// output yet, so its append waits for nothing either (MessageAppend.New).
	tr.reset()
	chunk(1)
	measured("first chunk")
	chunk(2) // warms the append statement up
	tr.reset()
	chunk(3)
	measured("output commit")
}

// answerRuntime answers every prompt at once with one chunk marked Final
// and the terminal, as the sim agent's instant answer does when the
// answer reaches the ACP pump after the prompt ended. Unlike the sim over
// ACP, whose chunk sometimes commits on its own first, it gives the same
// transactions every time.
type answerRuntime struct {
	*storetest.SinkRuntime
	settled chan error
	// atBarrier: the answer is over before the barrier and goes with the
	// acceptance, as the ACP adapter reports it when the agent's response
	// arrived first.
	atBarrier bool
}

func (r *answerRuntime) Dispatch(ctx context.Context, req host.DispatchRequest, sink host.TurnSink) error {
	a := host.Acceptance{ProviderSessionID: req.ProviderSessionID, ProviderTurnID: "pt-" + req.Ref.TurnID}
	answer := host.OutputEvent{Seq: 1, Key: "text-1", Kind: host.KindText, Text: "the answer", Done: true, Final: true}
	if r.atBarrier {
		a.Output, a.Terminal = []host.OutputEvent{answer}, &host.Terminal{Outcome: host.OutcomeCompleted}
	}
	if err := sink.Accepted(ctx, a); err != nil {
		return err
	}
	if r.atBarrier {
		r.settled <- nil
		return nil
	}
	go func() {
		ctx := context.WithoutCancel(ctx)
		err := sink.Output(ctx, answer)
		if err == nil {
			err = sink.Terminal(ctx, host.Terminal{Outcome: host.OutcomeCompleted})
		}
		r.settled <- err
	}()
	return nil
}

// TestDurableSubmitRoundTrips: one durable submit with an instant answer
// is 4 transactions: admission, dispatched, acceptance, output with
// settlement. BEGIN goes with each first statement; deferred writes, the
// outbox insert among them, go with the next statement or COMMIT; the
// session row is read ahead with the lock of each sink write's fenced
// load, the queue's head with its entries, and the settlement's queue
// reads with the Turn's interactions (settleahead.go); and the Host reads
// no latest Turn it holds (emitTreeAt). The settlement's probe goes with
// the Turn's fenced read (Tx.SettleAhead before the lock), and the
// answer's message, new in a Turn that applied no output yet, is appended
// with COMMIT (MessageAppend.New). The acceptance's claim update
// refuses on the server when the claim is missing, and the admission's
// Turn and claim inserts when either is a duplicate (Tx.AdmitClaim), so
// they go with COMMIT (ensemble_fence). They cost 2 + 2 + 2 + 2 = 8 round
// trips, against 9 + 6 + 9 + 14 = 38 one per statement. The
// settlement's reads of the Turn's interactions and the session's queue
// are one statement while both are empty (settleahead.go), and the row
// updates queued before an outbox insert run as its parts (outbox.go), the
// settled Turn's among them now that no read comes between: 25
// statements, BEGIN and COMMIT included.
func TestDurableSubmitRoundTrips(t *testing.T) {
	testSubmitRoundTrips(t, false, []int{2, 2, 2, 2}, 25)
}

// TestAnswerAtTheBarrierRoundTrips: an answer that is over before the
// barrier commits with the acceptance: 3 transactions per submit. The
// claim's new state is not read first (Tx.SetClaimState) and the answer's
// new message is appended without a wait (MessageAppend.New): both go
// with COMMIT; the settlement's probe goes with the Turn's read
// (Tx.SettleAhead).
func TestAnswerAtTheBarrierRoundTrips(t *testing.T) {
	testSubmitRoundTrips(t, true, []int{2, 2, 2}, 20)
}

func testSubmitRoundTrips(t *testing.T, atBarrier bool, want []int, wantStmts int) {
	url, _ := testSchema(t)
	tr := &rtTracer{}
	st := openTest(t, withParams(url, map[string]string{"pool_max_conns": "1"}), Options{Tracer: tr, Logger: quietLogger()})
	rt := &answerRuntime{SinkRuntime: storetest.NewSinkRuntime(), settled: make(chan error, 1), atBarrier: atBarrier}
	h, sid := rtSession(t, st, rt)
	ctx := t.Context()
	submit := func(id string) {
		t.Helper()
		if _, err := h.SendInput(ctx, host.SendInput{WorkspaceID: "ws-rt", SessionID: sid, ClientSubmitID: id,
			Content: host.MessageContent{Text: "prompt"}, SubmittedBy: "rt"}); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-rt.settled:
			if err != nil {
				t.Fatalf("answer to %s: %v", id, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("submit %s did not settle", id)
		}
	}
	// The first prompt starts the provider session; the second warms the
	// statement cache up on the steady path.
	submit("warm-1")
	submit("warm-2")
	tr.reset()
	submit("measured")

	txs := tr.transactions()
	got := roundTrips(txs)
	total := 0
	for _, n := range got {
		total += n
	}
	var trips strings.Builder
	for i, tt := range txs {
		fmt.Fprintf(&trips, "\n  transaction %d:%v", i+1, tt)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("round trips per transaction = %v (total %d), want %v%s", got, total, want, trips.String())
	}
	if n := statements(txs); n != wantStmts {
		t.Fatalf("statements = %d, want %d%s", n, wantStmts, trips.String())
	}
	t.Logf("durable submit: %d transactions, %d round trips and %d statements inside them%s", len(txs), total, wantStmts, trips.String())
	// Nothing outside them: a retried submit is found by the admission
	// (the claim's insert), not by a lookup first, and the Turn SendInput
	// returns is the one the acceptance committed, not read again.
	if other := tr.outside(); other != 0 {
		t.Fatalf("round trips outside transactions = %d, want 0", other)
	}
}

func drain(ch chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// rtSession opens a Host on st with rt, recovers it and creates the
// session the round-trip tests submit to.
func rtSession(t *testing.T, st host.Store, rt host.Runtime) (*host.Host, string) {
	t.Helper()
	h := host.New(host.Config{Store: st, Runtime: rt, Logger: quietLogger()})
	if _, err := h.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	r, err := h.CreateSession(t.Context(), host.CreateSessionInput{WorkspaceID: "ws-rt", CreatedBy: "rt"})
	if err != nil {
		t.Fatal(err)
	}
	return h, r.Session.ID
}

// TestQueuedPromptRoundTrips: a prompt sent while a Turn runs becomes a
// queue entry in one transaction of 4 round trips: BEGIN with the
// session's lock and read; the claim check; the claim's insert
// (Tx.AdmitClaim: a duplicate refuses the transaction on the server, so
// it waits for nothing and goes with the next statement) with the
// entry's insert, which bumps the queue's revision and takes the next
// position in the same statement (insertQueueEntrySQL); the outbox insert
// with COMMIT. With InsertClaim, which reports a duplicate itself, it was
// 7; with the revision, the position and the entry in three statements, 6.
func TestQueuedPromptRoundTrips(t *testing.T) {
	url, _ := testSchema(t)
	tr := &rtTracer{}
	st := openTest(t, withParams(url, map[string]string{"pool_max_conns": "1"}), Options{Tracer: tr, Logger: quietLogger()})
	rt := storetest.NewSinkRuntime()
	h, sid := rtSession(t, st, rt)
	ctx := t.Context()
	send := func(id string) host.SendResult {
		t.Helper()
		r, err := h.SendInput(ctx, host.SendInput{WorkspaceID: "ws-rt", SessionID: sid, ClientSubmitID: id,
			Content: host.MessageContent{Text: "prompt " + id}, SubmittedBy: "rt", Placement: host.PlacementNextTurn})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	send("running")
	<-rt.Sinks   // the Turn runs until the test ends
	send("warm") // warms the statement cache up
	tr.reset()
	if r := send("measured"); r.Disposition != host.DispositionFollowup {
		t.Fatalf("disposition %q, want %q", r.Disposition, host.DispositionFollowup)
	}
	txs := tr.transactions()
	if got, want := roundTrips(txs), []int{4}; !slices.Equal(got, want) {
		t.Fatalf("round trips per transaction = %v, want %v; trips:%v", got, want, txs)
	}
	t.Logf("queued prompt:%v", txs[0])
}
