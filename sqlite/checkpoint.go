package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"
)

// checkpointEvery is the least time between two background checkpoints
// while commits keep coming. At the fan-out load test's write rate
// (≈ 6,500 WAL pages/s) the WAL then holds at most ≈ 1,600 pages between
// checkpoints, the same order as SQLite's default auto-checkpoint (1,000).
const checkpointEvery = 250 * time.Millisecond

// checkpointer copies committed WAL frames into the database file from its
// own connection, so no commit pays for a checkpoint.
//
// With SQLite's default wal_autocheckpoint the connection whose COMMIT
// pushes the WAL past 1,000 pages runs the checkpoint inside that COMMIT
// (two fsyncs and the copy, 3–8 ms here, every ~80 output transactions at
// the default fan-out shape), and because the store has one writer
// connection every other session's commit waits behind it. The writer
// therefore runs with wal_autocheckpoint=0 and this goroutine runs
// PRAGMA wal_checkpoint(PASSIVE) after commits, at most every
// checkpointEvery: PASSIVE takes only the checkpoint lock, never the write
// lock, so the writer keeps appending to the WAL while it runs, and like
// the automatic checkpoint (also PASSIVE) it skips frames a reader still
// needs and lets the next writer restart the WAL once all are copied.
//
// Crash safety is unchanged: the connection has synchronous=NORMAL (dsn),
// under which a checkpoint syncs the WAL before it writes database pages
// and syncs the database before the WAL may be reused, as the automatic
// checkpoint did; a crash mid-checkpoint leaves the WAL to be replayed at
// the next open. Closing the last connection still checkpoints the WAL
// into the database and removes it.
type checkpointer struct {
	db    *sql.DB
	log   *slog.Logger
	every time.Duration
	kick  chan struct{} // one pending wake-up; commits never block on it
	stop  chan struct{}
	done  chan struct{}
}

func openCheckpointer(ctx context.Context, path string, every time.Duration, log *slog.Logger) (*checkpointer, error) {
	db, err := openSingle(ctx, path, nil)
	if err != nil {
		return nil, fmt.Errorf("checkpointer: %w", err)
	}
	c := &checkpointer{db: db, log: log, every: every,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c, nil
}

// committed wakes the checkpointer after a write transaction committed.
func (c *checkpointer) committed() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *checkpointer) run() {
	defer close(c.done)
	for {
		select {
		case <-c.stop:
			return
		case <-c.kick:
		}
		c.checkpoint()
		// Let commits accumulate: one checkpoint per interval, not one
		// per commit (each costs two fsyncs even when the WAL is small).
		t := time.NewTimer(c.every)
		select {
		case <-c.stop:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// checkpoint runs one PASSIVE checkpoint. A failure is logged, not fatal:
// committed data is safe in the WAL and the next round retries.
func (c *checkpointer) checkpoint() {
	ctx, cancel := context.WithTimeout(context.Background(), busyTimeout)
	defer cancel()
	var busy, logFrames, copied int
	err := c.db.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &logFrames, &copied)
	if err != nil {
		c.log.Warn("sqlite: background WAL checkpoint failed; retrying after the next commit", "err", err)
	}
}

// close stops the goroutine and closes its connection.
func (c *checkpointer) close() error {
	close(c.stop)
	<-c.done
	return c.db.Close()
}
