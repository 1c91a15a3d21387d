package sqlite

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// walPages is enough to pass SQLite's default auto-checkpoint threshold
// (1,000 pages) three times over.
const walPages = 3200

// writePages commits about walPages pages of 4 KiB through Update, in
// 16-page transactions.
func writePages(t *testing.T, st *Store) {
	t.Helper()
	ctx := t.Context()
	if err := st.Update(ctx, func(htx host.Tx) error {
		_, err := htx.(*tx).tx.ExecContext(ctx, "CREATE TABLE scratch (b BLOB)")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for range walPages / 16 {
		if err := st.Update(ctx, func(htx host.Tx) error {
			_, err := htx.(*tx).tx.ExecContext(ctx, "INSERT INTO scratch VALUES (randomblob(16 * 4096 - 256))")
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// A commit must not checkpoint the WAL: that stalls every other writer
// behind the store's one writer connection. With SQLite's auto-checkpoint
// the WAL would be copied and restarted every 1,000 pages and never grow
// far past that; with no background checkpointer running, it must hold
// every page written.
func TestCommitsDoNotCheckpoint(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ensemble.db")
	st, err := Open(t.Context(), path, Options{checkpointEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	writePages(t, st)
	const frame = 4096 + 24 // page plus frame header
	if got := fileSize(t, path+"-wal"); got < (walPages-100)*frame {
		t.Fatalf("WAL is %d bytes after writing %d pages: a commit checkpointed it", got, walPages)
	}
}

// The background checkpointer copies committed pages into the database
// file without any further commit.
func TestCheckpointerCopiesTheWAL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ensemble.db")
	st, err := Open(t.Context(), path, Options{checkpointEvery: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	writePages(t, st)
	// Waiting, not timing: the deadline only bounds a broken checkpointer.
	deadline := time.Now().Add(20 * time.Second)
	for fileSize(t, path) < (walPages-100)*4096 {
		if time.Now().After(deadline) {
			t.Fatalf("database file is %d bytes: the WAL's %d pages were not checkpointed", fileSize(t, path), walPages)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The data reads back through a fresh read (from the database file
	// now, the WAL no longer needed for it).
	var n int
	if err := st.r.QueryRowContext(t.Context(), "SELECT count(*) FROM scratch").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != walPages/16 {
		t.Fatalf("scratch rows = %d, want %d", n, walPages/16)
	}
}
