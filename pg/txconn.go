package pg

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ensemble-dev/ensemble/host"
)

// txConn is the connection of one write transaction (Store.Update). It
// saves round trips without changing what the server executes or in which
// order:
//
//   - BEGIN is not sent alone: it goes in one pgx.Batch with the
//     transaction's first statement (and Update sends nothing at all when fn
//     runs no statement).
//   - Deferred statements (queue) wait and go in one batch with the next
//     statement whose result is needed, or with COMMIT. A deferred write is
//     one whose result the Host does not use and whose outcome is known
//     unless the server fails it: no rows-affected answer that could be "no"
//     (tx.defersUpdate says when an UPDATE qualifies). Reads always flush
//     what is queued before them, in the same batch, so order and
//     read-your-writes are kept.
//   - Some reads go the same way when the Host's next call needs a row
//     with them (scan): the session row with its lock, a queue's head, the
//     outbox ids. A fence (the lease check, a Turn's insert, a claim's
//     new state, an output commit's checks) is a statement whose check may
//     refuse the transaction; it refuses on the server (ensemble_fence,
//     migration 00018), so one still queued at commit goes in COMMIT's
//     batch: refused, it makes the server skip the rest of the batch,
//     COMMIT included (one Sync ends the batch), and release rolls the
//     failed transaction back.
//
// A failure of BEGIN or of a deferred statement is recorded on the tx (the
// server aborted the transaction, so every later call fails with it) and is
// what Update returns. The statement that carried it is not run.
type txConn struct {
	t    *tx
	conn *pgxpool.Conn // acquired at the first round trip
	// begun: BEGIN was sent (with the first statement).
	begun  bool
	queued []deferred
	// ops counts the statements queued or sent; a row read ahead is still
	// current while it has not moved (tx.Session).
	ops int
	// settleTouches counts the statements that name a table a
	// settlement's probe reads (interactions, queue entries, session
	// queues); the probe read ahead is current while it has not moved
	// (tx.SettleAhead).
	settleTouches int
}

// count records one statement queued or sent.
func (c *txConn) count(sql string) {
	c.ops++
	if strings.Contains(sql, "interaction") || strings.Contains(sql, "queue") {
		c.settleTouches++
	}
}

// deferred is a statement sent with the next round trip.
type deferred struct {
	op   string // names the statement in its classified error
	sql  string
	args []any
	// check looks at the command tag once the statement ran; it may record
	// what the statement found (a lock) or refuse (nil: nothing to check).
	check func(pgconn.CommandTag) error
	// late: the statement is a write the caller was told had succeeded,
	// so its failure must reach Update instead of fn's own error.
	late bool
	// scan, when set, reads each row the statement returns (a read ahead).
	scan func(pgx.Rows) error
	// row: a plain UPDATE of this one row (tx.updateOne); such updates may
	// run as parts of the outbox insert queued after them (takeUpdates).
	row *rowKey
}

// queue defers a statement to the next round trip.
func (c *txConn) queue(d deferred) {
	c.count(d.sql)
	c.queued = append(c.queued, d)
}

// takeUpdates removes and returns the single-row updates queued last, in
// order, while each names another row: one statement may run them as its
// parts (outbox.go), where two updates of one row would not both apply.
func (c *txConn) takeUpdates() []deferred {
	i := len(c.queued)
	for i > 0 {
		d := c.queued[i-1]
		if d.row == nil || slices.ContainsFunc(c.queued[i:], func(o deferred) bool { return *o.row == *d.row }) {
			break
		}
		i--
	}
	taken := slices.Clone(c.queued[i:])
	c.queued = c.queued[:i]
	return taken
}

// direct reports that a statement can go alone: the transaction is open
// and nothing waits to be sent with it.
func (c *txConn) direct() bool { return c.begun && len(c.queued) == 0 }

// roundTrip sends BEGIN (the first time), the queued statements and, unless
// sql is empty, one more statement as one batch, and reads every result but
// the last, which the caller reads from the returned batch before closing
// it. A failure before the last result is recorded on the tx and returned
// classified; the batch is then closed already.
func (c *txConn) roundTrip(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	c.count(sql)
	for attempt := 0; ; attempt++ {
		if c.conn == nil {
			conn, err := c.t.store.pool.Acquire(ctx)
			if err != nil {
				c.t.store.lost(err)
				return nil, c.t.fail(classify("begin", err))
			}
			c.conn = conn
		}
		begin, queued := !c.begun, c.queued
		b := &pgx.Batch{}
		if begin {
			b.Queue("begin")
		}
		for _, d := range queued {
			b.Queue(d.sql, d.args...)
		}
		if sql != "" {
			b.Queue(sql, args...)
		}
		c.begun, c.queued = true, nil
		br := c.conn.SendBatch(ctx, b)
		if begin {
			if _, err := br.Exec(); err != nil {
				_ = br.Close()
				if attempt == 0 && pgconn.SafeToRetry(err) && ctx.Err() == nil {
					// A pooled connection that died while idle fails before
					// anything was sent; one retry dials a fresh one.
					c.t.store.lost(err)
					c.conn.Release()
					c.conn, c.begun, c.queued = nil, false, queued
					continue
				}
				c.t.store.lost(err)
				return nil, c.t.fail(classify("begin", err))
			}
		}
		for _, d := range queued {
			tag, err := d.result(br)
			if err != nil {
				err = classify(d.op, err)
			} else if d.check != nil {
				err = d.check(tag)
			}
			if err != nil {
				_ = br.Close()
				c.t.store.lost(err)
				if d.late && c.t.late == nil {
					c.t.late = err
				}
				return nil, c.t.fail(err)
			}
		}
		return br, nil
	}
}

// result reads a deferred statement's result from br: its command tag, and
// its rows through d.scan when it reads ahead.
func (d deferred) result(br pgx.BatchResults) (pgconn.CommandTag, error) {
	if d.scan == nil {
		return br.Exec()
	}
	rows, err := br.Query()
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	defer rows.Close()
	for rows.Next() {
		if err := d.scan(rows); err != nil {
			return pgconn.CommandTag{}, err
		}
	}
	rows.Close()
	return rows.CommandTag(), rows.Err()
}

// Exec, Query and QueryRow make txConn a querier: each is one round trip
// carrying BEGIN and the queued statements when there are any.

func (c *txConn) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if c.direct() {
		c.count(sql)
		return c.conn.Exec(ctx, sql, args...)
	}
	br, err := c.roundTrip(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func (c *txConn) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if c.direct() {
		c.count(sql)
		return c.conn.Query(ctx, sql, args...)
	}
	br, err := c.roundTrip(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

func (c *txConn) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if c.direct() {
		c.count(sql)
		return c.conn.QueryRow(ctx, sql, args...)
	}
	rows, err := c.Query(ctx, sql, args...)
	return &batchRow{rows: rows, err: err}
}

// flush sends the queued statements alone, as one round trip, and reads
// their results; op names a failure of the batch's end.
func (c *txConn) flush(ctx context.Context, op string) error {
	br, err := c.roundTrip(ctx, "", nil)
	if err != nil {
		return err
	}
	if err := br.Close(); err != nil {
		c.t.store.lost(err)
		return c.t.fail(classify(op, err))
	}
	return nil
}

// commit sends the queued statements and COMMIT as one batch. A
// transaction that never sent a statement has nothing to commit.
func (c *txConn) commit(ctx context.Context) error {
	if !c.begun && len(c.queued) == 0 {
		return nil
	}
	// Once COMMIT is sent, its outcome is the store's to learn, not the
	// caller's to abandon: cancelled mid-flight, the transaction may still
	// commit on the server while the caller hears a plain cancellation and
	// takes it as not written (an admission's Turn then stays dispatched
	// with nothing to send it). So COMMIT's round trip ignores the caller's
	// cancellation, bounded by commitTimeout; past it the outcome is
	// unknown, which ErrUnavailable says.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	tag, err := c.Exec(cctx, "commit")
	if err != nil && c.t.failed != nil && errors.Is(err, c.t.failed) {
		return err // a deferred write failed, reported as itself
	}
	if err != nil {
		c.t.store.lost(err)
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("pg: commit: outcome unknown: %w: %w", host.ErrUnavailable, err)
		}
		return classify("commit", err)
	}
	if tag.String() == "ROLLBACK" {
		// COMMIT answers ROLLBACK only in a transaction the server had
		// aborted before it. A statement of COMMIT's own batch that fails
		// makes the server skip COMMIT (its error is returned above), and
		// one that failed earlier stops the transaction before COMMIT is
		// sent: a guard, not expected.
		return fmt.Errorf("pg: commit: transaction was rolled back: %w", host.ErrUnavailable)
	}
	return nil
}

// release ends the transaction unless it committed and gives the
// connection back, whatever the caller's context says, so it returns to the
// pool clean (the pool closes one it cannot tell is clean).
func (c *txConn) release() {
	if c.conn == nil {
		return
	}
	pc := c.conn.Conn().PgConn()
	if !pc.IsClosed() && !pc.IsBusy() && pc.TxStatus() != 'I' {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := c.conn.Exec(ctx, "rollback"); err != nil {
			c.t.store.lost(err)
		}
		cancel()
	}
	c.conn.Release()
	c.conn = nil
}

// batchRows closes the batch that carried the rows with them.
type batchRows struct {
	pgx.Rows
	br  pgx.BatchResults
	err error
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Close() {
	r.Rows.Close()
	if r.br != nil {
		r.err = r.br.Close()
		r.br = nil
	}
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// batchRow is pgx.Row over batchRows: the first row, or pgx.ErrNoRows.
type batchRow struct {
	rows pgx.Rows
	err  error
}

func (r *batchRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}
