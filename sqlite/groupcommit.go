package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"modernc.org/sqlite"

	"github.com/ensemble-dev/ensemble/host"
)

// Group commit: concurrent Update calls share one write transaction.
//
// The store has one writer connection, so concurrent output transactions of
// different sessions queue for it and each pays its own BEGIN and COMMIT
// plus the goroutine handoffs between committers (docs/performance.md, "One-
// replica fanout tail"). Instead, callers enqueue their fn and one of them,
// the leader, runs everything queued (at most groupMax fns, in arrival
// order) in one transaction: each fn in its own SAVEPOINT, so one fn's error
// or panic undoes only its own writes, then one COMMIT for the group.
//
// The leader is a caller, not a goroutine the store owns: with nothing
// queued the first caller runs its fn at once on its own goroutine (no
// handoff, as before), and no goroutine outlives the calls that need it. A
// leader that finishes hands leadership to the oldest waiting caller, which
// it had to wake anyway.
type groupCommit struct {
	mu      sync.Mutex
	queue   []*call // arrival order
	leading bool    // a leader is running; new calls wait their turn

	// commits counts successful COMMITs, groups the transactions begun,
	// updates the Update calls those COMMITs made durable (GroupCommitStats).
	commits, groups, updates atomic.Int64
	// commit ends the transaction; nil is tx.Commit. Tests replace it to
	// make a COMMIT fail.
	commit func(*sql.Tx) error
}

// groupMax bounds a group: a larger group makes its first caller wait
// longer for the fns after it.
const groupMax = 64

// Call states. A pending call may be cancelled by its caller or started
// by the leader, never both (compare-and-swap).
const (
	callPending int32 = iota
	callLead          // designated leader; only its own goroutine moves it on
	callCancelled
	callStarted
	callDone
)

type call struct {
	ctx   context.Context
	fn    func(host.Tx) error
	state atomic.Int32
	wake  chan struct{} // cap 1: one send, for leadership or for the result

	err      error
	panicked bool
	panicVal any
}

// GroupCommitStats counts what group commit did since Open: Updates ÷
// Commits is the mean group size (1 when writers never overlap).
type GroupCommitStats struct {
	Commits int64 // successful COMMITs
	Updates int64 // Update calls they made durable
}

// GroupCommitStats reports the counters behind the server's
// ensemble_sqlite_commits_total and ensemble_sqlite_updates_committed_total.
func (s *Store) GroupCommitStats() GroupCommitStats {
	return GroupCommitStats{Commits: s.gc.commits.Load(), Updates: s.gc.updates.Load()}
}

// Update runs fn in a write transaction, possibly shared with other
// concurrent Update calls (group commit). fn's error is returned unchanged
// so typed *host.Error values pass through; a panic in fn is re-raised
// here after its writes are rolled back. A caller whose ctx ends before its
// fn starts gets ctx.Err() and writes nothing; once fn runs, ctx no longer
// interrupts the shared transaction (preparedTx).
func (s *Store) Update(ctx context.Context, fn func(host.Tx) error) error {
	if _, err := s.writer(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	c := &call{ctx: ctx, fn: fn, wake: make(chan struct{}, 1)}
	g := &s.gc
	g.mu.Lock()
	g.queue = append(g.queue, c)
	lead := !g.leading
	g.leading = true
	g.mu.Unlock()
	if !lead {
		lead = c.await()
	}
	if lead {
		s.lead(c)
	}
	if c.panicked {
		panic(c.panicVal)
	}
	return c.err
}

// await waits until the call is done (false) or made leader (true); a
// pending call whose ctx ends is cancelled and gets ctx.Err().
func (c *call) await() bool {
	done := c.ctx.Done()
	for {
		select {
		case <-c.wake:
		case <-done:
			if c.state.CompareAndSwap(callPending, callCancelled) {
				c.err = c.ctx.Err()
				return false
			}
			done = nil // started, or about to be woken: wait for that
			continue
		}
		switch c.state.Load() {
		case callLead:
			return true
		case callDone:
			return false
		}
	}
}

// lead runs groups until me has its result, then hands leadership to the
// oldest waiting caller. If the leader's goroutine is unwound by something
// other than a recovered panic (runtime.Goexit from a fn, e.g. t.Fatal in
// a test), the deferred handoff still runs so the queue never stalls.
func (s *Store) lead(me *call) {
	g := &s.gc
	me.state.Store(callPending) // only this goroutine could cancel it
	defer func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		for len(g.queue) > 0 {
			next := g.queue[0]
			if next.state.CompareAndSwap(callPending, callLead) {
				next.wake <- struct{}{}
				return
			}
			g.queue = g.queue[1:] // cancelled while waiting
		}
		g.leading = false
	}()
	for me.state.Load() != callDone && me.state.Load() != callCancelled {
		g.mu.Lock()
		n := min(len(g.queue), groupMax)
		batch := append([]*call(nil), g.queue[:n]...)
		g.queue = g.queue[n:]
		g.mu.Unlock()
		s.runGroup(batch)
	}
}

// finish records a call's outcome and wakes its caller (unless the caller
// is the leader itself, which is not waiting).
func finish(c *call, err error) {
	c.err = err
	c.state.Store(callDone)
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// errAbandoned is what the callers of a group get if its leader's
// goroutine is unwound mid-group by something other than a fn's panic
// (runtime.Goexit in a fn, e.g. t.Fatal in a test): nothing was committed.
var errAbandoned = errors.New("sqlite: update: group commit abandoned: a function exited its goroutine; nothing was committed")

// runGroup runs the batch's fns in one transaction and gives each call its
// outcome. Every call of the batch has one when it returns, even if the
// goroutine is unwound.
func (s *Store) runGroup(batch []*call) {
	g := &group{s: s, batch: batch}
	unwound := true
	defer func() {
		if unwound {
			if g.tx != nil {
				_ = g.tx.Rollback()
			}
			g.fail(errAbandoned)
		}
	}()
	g.run()
	unwound = false
}

// group is one shared write transaction and the calls it serves.
type group struct {
	s         *Store
	batch     []*call
	next      int     // batch[next:] not taken yet
	cur       *call   // its fn is running
	succeeded []*call // fn returned nil; the outcome waits for COMMIT
	tx        *sql.Tx
}

// fail gives err to the running call, to those awaiting COMMIT and to the
// ones not started.
func (g *group) fail(err error) {
	if g.cur != nil {
		finish(g.cur, err)
		g.cur = nil
	}
	for _, c := range g.succeeded {
		finish(c, err)
	}
	g.succeeded = nil
	for ; g.next < len(g.batch); g.next++ {
		if c := g.batch[g.next]; c.state.CompareAndSwap(callPending, callStarted) {
			finish(c, err)
		}
	}
}

func (g *group) run() {
	// The transaction belongs to the group, not to any caller: it begins
	// on a context no caller can cancel (database/sql rolls a transaction
	// back when its BeginTx context ends).
	bg := context.Background()
	conn, err := g.s.w.Conn(bg)
	if err != nil {
		g.fail(classify("begin", err))
		return
	}
	defer func() {
		// sql.Conn.Close waits for an open transaction to end: end it
		// first if the goroutine is being unwound mid-group (a no-op
		// after COMMIT or ROLLBACK).
		if g.tx != nil {
			_ = g.tx.Rollback()
		}
		conn.Close()
	}()
	if g.tx, err = conn.BeginTx(bg, nil); err != nil {
		g.tx = nil
		g.fail(classify("begin", err))
		return
	}
	g.s.gc.groups.Add(1)
	grouped := len(g.batch) > 1 // a lone fn needs no savepoint
	for g.next < len(g.batch) {
		c := g.batch[g.next]
		g.next++
		if !c.state.CompareAndSwap(callPending, callStarted) {
			continue // cancelled while waiting; its caller has returned
		}
		if err := c.ctx.Err(); err != nil {
			finish(c, err) // not started: nothing written
			continue
		}
		g.cur = c
		if grouped {
			if _, err := g.tx.ExecContext(bg, "SAVEPOINT g"); err != nil {
				_ = g.tx.Rollback()
				g.fail(classify("savepoint", err))
				return
			}
		}
		err, panicked, p := runFn(g.s, g.tx, c.fn)
		c.panicked, c.panicVal = panicked, p
		if !grouped {
			g.cur = nil
			if err != nil || panicked {
				_ = g.tx.Rollback()
				finish(c, err)
				return
			}
			g.succeeded = append(g.succeeded, c)
			continue
		}
		if err == nil && !panicked {
			// Deferred foreign keys are checked at COMMIT: a fn that left
			// one unresolved would fail everyone's COMMIT, so it fails
			// alone here, as it would have in its own transaction.
			if err = deferredFKs(conn); err == nil {
				if _, err := g.tx.ExecContext(bg, "RELEASE g"); err != nil {
					_ = g.tx.Rollback()
					g.fail(classify("release savepoint", err))
					return
				}
				g.cur = nil
				g.succeeded = append(g.succeeded, c)
				continue
			}
			if errors.Is(err, errSavepointState) {
				_ = g.tx.Rollback()
				g.fail(err)
				return
			}
		}
		// fn failed: undo its writes only. If that fails the transaction
		// is in an unknown state (or gone): nobody's work may commit.
		g.cur = nil
		rerr := rollbackTo(g.tx)
		finish(c, err)
		if rerr != nil {
			_ = g.tx.Rollback()
			g.fail(classify("rollback to savepoint", rerr))
			return
		}
	}
	if len(g.succeeded) == 0 {
		_ = g.tx.Rollback()
		return
	}
	commit := g.s.gc.commit
	if commit == nil {
		commit = (*sql.Tx).Commit
	}
	if err := commit(g.tx); err != nil {
		g.fail(classify("commit", err))
		return
	}
	g.s.gc.commits.Add(1)
	g.s.gc.updates.Add(int64(len(g.succeeded)))
	if g.s.ckpt != nil {
		g.s.ckpt.committed()
	}
	for _, c := range g.succeeded {
		finish(c, nil)
	}
	g.succeeded = nil
}

// rollbackTo undoes the current fn's writes and ends its savepoint.
func rollbackTo(sqlTx *sql.Tx) error {
	if _, err := sqlTx.ExecContext(context.Background(), "ROLLBACK TO g"); err != nil {
		return err
	}
	_, err := sqlTx.ExecContext(context.Background(), "RELEASE g")
	return err
}

// runFn runs fn on the shared transaction and recovers its panic, so the
// other fns of the group go on; the caller re-raises it.
func runFn(s *Store, sqlTx *sql.Tx, fn func(host.Tx) error) (err error, panicked bool, p any) {
	defer func() {
		if r := recover(); r != nil {
			err, panicked, p = nil, true, r
		}
	}()
	return fn(&tx{tx: preparedTx{Tx: sqlTx, stmts: s.hot}, s: s}), false, nil
}

// errSavepointState marks a failure to read the connection's deferred
// foreign-key state: the group cannot tell whether it may commit.
var errSavepointState = errors.New("sqlite: read deferred foreign-key state")

// errDeferredFK is what a fn of a group gets when it leaves a deferred
// foreign key unresolved: the same refusal its own COMMIT would have given.
var errDeferredFK = errors.New("sqlite: commit: FOREIGN KEY constraint failed")

// deferredFKs returns errDeferredFK if the transaction has unresolved
// deferred foreign-key constraints (SQLITE_DBSTATUS_DEFERRED_FKS).
func deferredFKs(conn *sql.Conn) error {
	var cur int
	err := conn.Raw(func(dc any) error {
		st, ok := dc.(sqlite.DBStatus)
		if !ok {
			return fmt.Errorf("driver connection %T has no DBStatus", dc)
		}
		var err error
		cur, _, err = st.Status(sqlite.DBStatusDeferredFKs, false)
		return err
	})
	if err != nil {
		return fmt.Errorf("%w: %w", errSavepointState, err)
	}
	if cur != 0 {
		return errDeferredFK
	}
	return nil
}
