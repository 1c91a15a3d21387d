package sqlite

import (
	"database/sql"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ensemble-dev/ensemble/host/storetest"
)

// TestOutputCommitPages: a streamed chunk's commit writes pages of these
// b-trees only. The Turn's applied sequence and the session's message
// version are written without naming any other column, so no index on
// those rows is rewritten (host.OutputTx.AdvanceTurn), and the outbox and
// a message's turn have no index an append moves (migration 00016), nor
// has the message's version while it streams (00017, stream_version). Each
// page is a WAL frame, two pwrite calls: an index added here costs every
// chunk, so it belongs in this list and in docs/performance.md. The test
// reads the pages each output commit appended to the WAL and names their
// b-trees with the dbstat table.
func TestOutputCommitPages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ensemble.db")
	st, err := Open(t.Context(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	allowed := []string{"messages", "message_parts", "turns", "sessions",
		"outbox", "sqlite_sequence",
		"sqlite_schema"} // page 1, the file header, when the file grows
	commits, frames := 0, 0
	perTree := map[string]int{}
	storetest.StreamChunks(t, st, 60, func(i int) {
		if i < 10 {
			return // the message and its first pieces
		}
		trees := lastCommitTrees(t, db, path+"-wal")
		if !slices.Contains(trees, "messages") {
			return // the WAL was checkpointed away, or another writer came last
		}
		commits++
		frames += len(trees)
		for _, name := range trees {
			perTree[name]++
			if !slices.Contains(allowed, name) {
				t.Fatalf("chunk %d: the output commit wrote a page of %q; its pages: %v", i, name, trees)
			}
		}
	})
	if commits < 25 {
		t.Fatalf("only %d of 50 output commits were found in the WAL", commits)
	}
	t.Logf("%.1f WAL frames per output commit over %d commits", float64(frames)/float64(commits), commits)
	for _, name := range allowed {
		t.Logf("  %-16s %.2f", name, float64(perTree[name])/float64(commits))
	}
}

// lastCommitTrees returns, for each frame of the last transaction
// committed to the WAL at walPath, the name of the table or index that
// owns its page (sqlite.org/fileformat.html, "WAL File Format": a 32-byte
// header, then frames of a 24-byte header and a page; a frame with a
// non-zero database size ends a commit, and frames whose salts differ
// from the header's are left from before the WAL was restarted).
func lastCommitTrees(t *testing.T, db *sql.DB, walPath string) []string {
	t.Helper()
	b, err := os.ReadFile(walPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 32 {
		return nil
	}
	be := binary.BigEndian
	pageSize := int(be.Uint32(b[8:12]))
	salt1, salt2 := be.Uint32(b[16:20]), be.Uint32(b[20:24])
	var cur, last []uint32
	for off := 32; off+24+pageSize <= len(b); off += 24 + pageSize {
		h := b[off : off+24]
		if be.Uint32(h[8:12]) != salt1 || be.Uint32(h[12:16]) != salt2 {
			break
		}
		cur = append(cur, be.Uint32(h[0:4]))
		if be.Uint32(h[4:8]) != 0 {
			last, cur = cur, nil
		}
	}
	owner := map[uint32]string{}
	rows, err := db.Query(`SELECT name, pageno FROM dbstat`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var page uint32
		if err := rows.Scan(&name, &page); err != nil {
			t.Fatal(err)
		}
		owner[page] = name
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	trees := make([]string, len(last))
	for i, p := range last {
		trees[i] = owner[p]
	}
	return trees
}
