package sqlite

import (
	"context"
	"database/sql"
	"slices"
)

// hotSQL are the statements every output transaction runs besides the
// append (the check that the Turn and session are as the last commit left
// them, or the fenced Turn and session reads, the Turn and session
// advances, the outbox row), and the Turn and session updates of every
// lifecycle transaction. They are prepared once on the writer's only
// connection at Open: database/sql over modernc.org/sqlite otherwise
// parses each one anew, which was a quarter of an output transaction's CPU
// (pprof of the fan-out load test), time the one writer connection is held
// while every other session's commit waits for it.
var hotSQL = []string{expectOutputSQL, getTurnSQL, getSessionSQL, advanceTurnSQL, advanceSessionSQL, updateTurnSQL, updateSessionSQL, insertFactSQL}

// appendSQL are the append statements, prepared the same way: they run
// once per message per output batch.
var appendSQL = []string{streamAppendSQL, appendMessageSQL, insertPartSQL, deletePartsSQL}

// preparedTx is a write transaction that runs the statements prepared at
// Open through their prepared form and any other statement as before. The
// SQL text is the key, so a call site needs no change to use it.
type preparedTx struct {
	*sql.Tx
	stmts map[string]*sql.Stmt // read-only after Open
}

func (p preparedTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	ctx = statementCtx(ctx)
	if st := p.stmts[query]; st != nil {
		return p.Tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return p.Tx.QueryContext(ctx, query, args...)
}

func (p preparedTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	ctx = statementCtx(ctx)
	if st := p.stmts[query]; st != nil {
		return p.Tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	return p.Tx.QueryRowContext(ctx, query, args...)
}

func (p preparedTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	ctx = statementCtx(ctx)
	if st := p.stmts[query]; st != nil {
		return p.Tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return p.Tx.ExecContext(ctx, query, args...)
}

// statementCtx is the context a statement of an Update runs with. The
// transaction may be shared with other callers (group commit), and
// modernc.org/sqlite answers a context ending mid-statement with
// sqlite3_interrupt, which can roll back the whole transaction: so a
// running statement never sees the caller's cancellation. A context that
// has already ended still fails the statement before it starts
// (database/sql checks it first), so a cancelled fn stops at its next
// statement and only its own savepoint is rolled back.
func statementCtx(ctx context.Context) context.Context {
	if ctx.Err() != nil {
		return ctx
	}
	return context.WithoutCancel(ctx)
}

// prepareHot prepares hotSQL and appendSQL on the writer pool (one
// connection, idle at Open: a statement cannot be prepared on the pool
// while a transaction holds that connection).
func prepareHot(ctx context.Context, w *sql.DB) (map[string]*sql.Stmt, error) {
	all := slices.Concat(hotSQL, appendSQL)
	stmts := make(map[string]*sql.Stmt, len(all))
	for _, q := range all {
		st, err := w.PrepareContext(ctx, q)
		if err != nil {
			for _, s := range stmts {
				s.Close()
			}
			return nil, classify("prepare", err)
		}
		stmts[q] = st
	}
	return stmts, nil
}
