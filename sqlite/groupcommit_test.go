package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

var gcNow = time.UnixMilli(1_750_000_000_000).UTC()

func insertSession(ctx context.Context, tx host.Tx, id string) error {
	return tx.InsertSession(ctx, host.Session{WorkspaceID: "w", ID: id, RootID: id, CreatedAt: gcNow, UpdatedAt: gcNow})
}

// hasSession reads through the read pool: what is committed.
func hasSession(t *testing.T, st *Store, id string) bool {
	t.Helper()
	_, err := st.GetSession(context.Background(), "w", id)
	if err != nil && !errors.Is(err, host.ErrNotFound) {
		t.Fatalf("GetSession %s: %v", id, err)
	}
	return err == nil
}

// queued is how many calls wait for the current leader.
func queued(st *Store) int {
	st.gc.mu.Lock()
	defer st.gc.mu.Unlock()
	return len(st.gc.queue)
}

// waitQueued waits until n calls wait behind the leader.
func waitQueued(t *testing.T, st *Store, n int) {
	t.Helper()
	for queued(st) < n {
		if t.Context().Err() != nil {
			t.Fatalf("never %d queued calls", n)
		}
		time.Sleep(time.Millisecond)
	}
}

// holdLeader starts an Update that writes session id and then blocks in
// its fn, so the calls made meanwhile queue into the next group. release
// lets it finish; its result arrives on the returned channel.
func holdLeader(t *testing.T, st *Store, id string) (release func(), result <-chan error) {
	t.Helper()
	started, unblock := make(chan struct{}), make(chan struct{})
	res := make(chan error, 1)
	go func() {
		res <- st.Update(context.Background(), func(tx host.Tx) error {
			if err := insertSession(context.Background(), tx, id); err != nil {
				return err
			}
			close(started)
			<-unblock
			return nil
		})
	}()
	<-started
	var once sync.Once
	release = func() { once.Do(func() { close(unblock) }) }
	t.Cleanup(release)
	return release, res
}

// outcome is what one Update call returned or raised.
type outcome struct {
	err      error
	panicked any
}

// enqueue starts Update(fn) on its own goroutine and waits until it is
// queued behind the held leader, so calls keep their arrival order.
func enqueue(t *testing.T, st *Store, ctx context.Context, fn func(host.Tx) error) <-chan outcome {
	t.Helper()
	n := queued(st)
	out := make(chan outcome, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				out <- outcome{panicked: p}
			}
		}()
		out <- outcome{err: st.Update(ctx, fn)}
	}()
	waitQueued(t, st, n+1)
	return out
}

func TestGroupCommitSharesOneTransaction(t *testing.T) {
	st := openTemp(t)
	const n = 40
	before := st.GroupCommitStats()
	release, leader := holdLeader(t, st, "lead")
	var outs []<-chan outcome
	for i := range n {
		ctx := context.Background()
		outs = append(outs, enqueue(t, st, ctx, func(tx host.Tx) error {
			return insertSession(ctx, tx, fmt.Sprintf("s%02d", i))
		}))
	}
	release()
	if err := <-leader; err != nil {
		t.Fatalf("leader: %v", err)
	}
	for i, o := range outs {
		if r := <-o; r.err != nil || r.panicked != nil {
			t.Fatalf("call %d: %+v", i, r)
		}
	}
	// The leader's own transaction, then one for the 40 that queued.
	after := st.GroupCommitStats()
	if got := after.Commits - before.Commits; got != 2 {
		t.Fatalf("%d Update calls committed in %d transactions, want 2", n+1, got)
	}
	if got := after.Updates - before.Updates; got != n+1 {
		t.Fatalf("GroupCommitStats counted %d updates committed, want %d", got, n+1)
	}
	for i := range n {
		if !hasSession(t, st, fmt.Sprintf("s%02d", i)) {
			t.Fatalf("s%02d missing", i)
		}
	}
	if !hasSession(t, st, "lead") {
		t.Fatal("leader's write missing")
	}
}

// A fn's error undoes only its own writes, reaches only its own caller,
// unchanged, and a later fn of the group sees the earlier fns' writes
// exactly as if they had run one after another.
func TestGroupCommitErrorIsPerCaller(t *testing.T) {
	st := openTemp(t)
	before := st.GroupCommitStats()
	release, leader := holdLeader(t, st, "lead")
	ctx := context.Background()
	want := &host.Error{Code: host.CodeSessionBusy, Message: "no"}
	first := enqueue(t, st, ctx, func(tx host.Tx) error { return insertSession(ctx, tx, "s1") })
	failing := enqueue(t, st, ctx, func(tx host.Tx) error {
		if err := insertSession(ctx, tx, "s2"); err != nil {
			return err
		}
		return want
	})
	var sawS1, sawS2 bool
	third := enqueue(t, st, ctx, func(tx host.Tx) error {
		_, err1 := tx.Session(ctx, "w", "s1")
		_, err2 := tx.Session(ctx, "w", "s2")
		sawS1, sawS2 = err1 == nil, err2 == nil
		return insertSession(ctx, tx, "s3")
	})
	release()
	if err := <-leader; err != nil {
		t.Fatal(err)
	}
	if r := <-first; r.err != nil {
		t.Fatalf("first: %v", r.err)
	}
	if r := <-failing; r.err != error(want) {
		t.Fatalf("failing fn's caller got %v, want its own *host.Error unchanged", r.err)
	}
	if r := <-third; r.err != nil {
		t.Fatalf("third: %v", r.err)
	}
	after := st.GroupCommitStats()
	if got := after.Commits - before.Commits; got != 2 {
		t.Fatalf("the leader and the three queued calls took %d commits, want 2 (the leader's, one group)", got)
	}
	if got := after.Updates - before.Updates; got != 3 {
		t.Fatalf("%d updates counted committed, want 3: the leader's and the two that succeeded, not the failed one", got)
	}
	if !sawS1 || sawS2 {
		t.Fatalf("third fn saw s1=%v s2=%v; want the first fn's write and not the failed one's", sawS1, sawS2)
	}
	if !hasSession(t, st, "s1") || hasSession(t, st, "s2") || !hasSession(t, st, "s3") {
		t.Fatal("want s1 and s3 committed, s2 rolled back")
	}
}

func TestGroupCommitPanicIsPerCaller(t *testing.T) {
	st := openTemp(t)
	release, leader := holdLeader(t, st, "lead")
	ctx := context.Background()
	first := enqueue(t, st, ctx, func(tx host.Tx) error { return insertSession(ctx, tx, "s1") })
	boom := enqueue(t, st, ctx, func(tx host.Tx) error {
		if err := insertSession(ctx, tx, "s2"); err != nil {
			return err
		}
		panic("boom")
	})
	third := enqueue(t, st, ctx, func(tx host.Tx) error { return insertSession(ctx, tx, "s3") })
	release()
	if err := <-leader; err != nil {
		t.Fatalf("leader: %v", err)
	}
	if r := <-first; r.err != nil || r.panicked != nil {
		t.Fatalf("first: %+v", r)
	}
	if r := <-boom; r.panicked != "boom" {
		t.Fatalf("panicking fn's caller: %+v; want the panic re-raised in it", r)
	}
	if r := <-third; r.err != nil || r.panicked != nil {
		t.Fatalf("third: %+v", r)
	}
	if !hasSession(t, st, "s1") || hasSession(t, st, "s2") || !hasSession(t, st, "s3") {
		t.Fatal("want s1 and s3 committed, s2 rolled back")
	}
}

// A caller whose context ends while it waits is dropped: it gets
// ctx.Err() at once and its fn never runs.
func TestGroupCommitCancelledWaiterWritesNothing(t *testing.T) {
	st := openTemp(t)
	release, leader := holdLeader(t, st, "lead")
	ctx, cancel := context.WithCancel(context.Background())
	ran := false
	out := enqueue(t, st, ctx, func(tx host.Tx) error {
		ran = true
		return insertSession(ctx, tx, "cancelled")
	})
	cancel()
	if r := <-out; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled waiter: %+v; want context.Canceled", r)
	}
	other := enqueue(t, st, context.Background(), func(tx host.Tx) error {
		return insertSession(context.Background(), tx, "after")
	})
	release()
	if err := <-leader; err != nil {
		t.Fatal(err)
	}
	if r := <-other; r.err != nil {
		t.Fatalf("next caller: %v", r.err)
	}
	if ran || hasSession(t, st, "cancelled") {
		t.Fatalf("cancelled caller's fn ran=%v", ran)
	}
	if !hasSession(t, st, "after") {
		t.Fatal("the caller after the cancelled one did not commit")
	}
}

// A caller's context ending while its fn runs fails that fn's next
// statement, never the shared transaction: the others commit.
func TestGroupCommitCancelInsideFnSparesTheGroup(t *testing.T) {
	st := openTemp(t)
	release, leader := holdLeader(t, st, "lead")
	ctx, cancel := context.WithCancel(context.Background())
	bg := context.Background()
	first := enqueue(t, st, bg, func(tx host.Tx) error { return insertSession(bg, tx, "s1") })
	cancelled := enqueue(t, st, ctx, func(tx host.Tx) error {
		if err := insertSession(ctx, tx, "s2"); err != nil {
			return err
		}
		cancel()
		return insertSession(ctx, tx, "s2b")
	})
	third := enqueue(t, st, bg, func(tx host.Tx) error { return insertSession(bg, tx, "s3") })
	release()
	if err := <-leader; err != nil {
		t.Fatal(err)
	}
	if r := <-cancelled; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("fn cancelled mid-way: %+v; want context.Canceled", r)
	}
	for _, o := range []<-chan outcome{first, third} {
		if r := <-o; r.err != nil {
			t.Fatalf("other caller: %v", r.err)
		}
	}
	if !hasSession(t, st, "s1") || hasSession(t, st, "s2") || hasSession(t, st, "s2b") || !hasSession(t, st, "s3") {
		t.Fatal("want s1 and s3 committed, nothing of the cancelled fn")
	}
}

// A fn that leaves a deferred foreign key unresolved fails alone, as its
// own COMMIT would have, instead of failing the group's COMMIT.
func TestGroupCommitDeferredForeignKeyIsPerCaller(t *testing.T) {
	st := openTemp(t)
	release, leader := holdLeader(t, st, "lead")
	ctx := context.Background()
	orphan := enqueue(t, st, ctx, func(tx host.Tx) error {
		return tx.InsertTurn(ctx, host.Turn{WorkspaceID: "w", SessionID: "nosuch", ID: "t", Seq: 1,
			Phase: host.PhaseQueued, CreatedAt: gcNow, UpdatedAt: gcNow})
	})
	good := enqueue(t, st, ctx, func(tx host.Tx) error { return insertSession(ctx, tx, "s1") })
	release()
	if err := <-leader; err != nil {
		t.Fatal(err)
	}
	if r := <-orphan; r.err == nil || !strings.Contains(r.err.Error(), "FOREIGN KEY") {
		t.Fatalf("orphan turn: %+v; want a foreign key failure", r)
	}
	if r := <-good; r.err != nil {
		t.Fatalf("the other caller: %v", r.err)
	}
	if !hasSession(t, st, "s1") {
		t.Fatal("s1 missing")
	}
	var n int
	if err := st.r.QueryRow("SELECT count(*) FROM turns").Scan(&n); err != nil || n != 0 {
		t.Fatalf("turns: %d, %v; want the orphan rolled back", n, err)
	}
}

// When the group's COMMIT fails, every caller whose fn succeeded hears of
// it: no success is reported for work that was not committed.
func TestGroupCommitCommitFailureReachesEveryCaller(t *testing.T) {
	st := openTemp(t)
	release, leader := holdLeader(t, st, "lead")
	ctx := context.Background()
	mine := errors.New("mine")
	var outs []<-chan outcome
	for i := range 3 {
		outs = append(outs, enqueue(t, st, ctx, func(tx host.Tx) error {
			return insertSession(ctx, tx, fmt.Sprintf("s%d", i))
		}))
	}
	failing := enqueue(t, st, ctx, func(tx host.Tx) error { return mine })
	// A real failing COMMIT: the transaction is gone when it runs.
	st.gc.commit = func(tx *sql.Tx) error {
		if _, err := tx.Exec("ROLLBACK"); err != nil {
			return err
		}
		return tx.Commit()
	}
	release()
	if err := <-leader; err == nil || !strings.Contains(err.Error(), "commit") {
		t.Fatalf("leader: %v; want the commit failure", err)
	}
	for i, o := range outs {
		if r := <-o; r.err == nil || !strings.Contains(r.err.Error(), "commit") {
			t.Fatalf("call %d: %+v; want the commit failure", i, r)
		}
	}
	if r := <-failing; r.err != mine {
		t.Fatalf("failing fn's caller: %v; want its own error", r.err)
	}
	for i := range 3 {
		if hasSession(t, st, fmt.Sprintf("s%d", i)) {
			t.Fatalf("s%d visible after a failed commit", i)
		}
	}
	st.gc.commit = nil
	if err := st.Update(ctx, func(tx host.Tx) error { return insertSession(ctx, tx, "later") }); err != nil {
		t.Fatalf("Update after a failed commit: %v", err)
	}
}

// Many concurrent callers, no coordination: everything commits, and
// (under -race) the hand-offs between leaders are race free.
func TestGroupCommitConcurrentCallers(t *testing.T) {
	st := openTemp(t)
	const workers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				ctx := context.Background()
				errs <- st.Update(ctx, func(tx host.Tx) error {
					return insertSession(ctx, tx, fmt.Sprintf("w%d-%d", w, i))
				})
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := st.r.QueryRow("SELECT count(*) FROM sessions").Scan(&n); err != nil || n != workers*each {
		t.Fatalf("sessions: %d, %v; want %d", n, err, workers*each)
	}
	if c := st.gc.commits.Load(); c > workers*each {
		t.Fatalf("%d commits for %d calls", c, workers*each)
	}
	t.Logf("%d calls, %d commits", workers*each, st.gc.commits.Load())
}

// A fn that unwinds the leader's goroutine without a panic
// (runtime.Goexit, as t.Fatal does) must not stall the store: the rest of
// its group fails, nothing of it commits, and the next caller leads. The
// goroutine that exits is the leader's (here the first queued caller's):
// fns of a group run on it.
func TestGroupCommitGoexitDoesNotStall(t *testing.T) {
	st := openTemp(t)
	release, leader := holdLeader(t, st, "lead")
	ctx := context.Background()
	enqueue(t, st, ctx, func(tx host.Tx) error { return insertSession(ctx, tx, "s1") }) // leads the next group
	exits := enqueue(t, st, ctx, func(tx host.Tx) error { runtime.Goexit(); return nil })
	third := enqueue(t, st, ctx, func(tx host.Tx) error { return insertSession(ctx, tx, "s3") })
	release()
	if err := <-leader; err != nil {
		t.Fatal(err)
	}
	for _, o := range []<-chan outcome{exits, third} {
		if r := <-o; !errors.Is(r.err, errAbandoned) {
			t.Fatalf("caller in the abandoned group: %+v; want errAbandoned", r)
		}
	}
	if err := st.Update(ctx, func(tx host.Tx) error { return insertSession(ctx, tx, "after") }); err != nil {
		t.Fatalf("Update after an abandoned group: %v", err)
	}
	if hasSession(t, st, "s1") || hasSession(t, st, "s3") || !hasSession(t, st, "after") {
		t.Fatal("want only the later write committed")
	}
}
